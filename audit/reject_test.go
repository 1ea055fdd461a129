package audit

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A syntax error inside an argument's value names where it is, not the
// characters it found: a rejection's detail is stored and shown, and no
// argument value may be (SPEC §1).
func TestSyntaxErrorsQuoteNoArgument(t *testing.T) {
	for _, line := range []string{
		`{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","args":{"password":"hunt\qSECRET"}}`,
		`{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","args":{"password":QSECRET}}`,
	} {
		_, err := Decode([]byte(line), Options{})
		var rej *Rejection
		require.ErrorAs(t, err, &rej)
		assert.Equal(t, ReasonMalformedJSON, rej.Reason)
		assert.Contains(t, rej.Detail, "at byte")
		assert.NotContains(t, rej.Detail, "q", line)
		assert.NotContains(t, rej.Detail, "Q", line)
	}
}

func TestDecodeRejections(t *testing.T) {
	const ok = `"ts":"2026-11-03T09:00:00Z","server":"proxmox-mcp","tool":"get_vm_status"`
	long := strings.Repeat("x", 1025)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name   string
		format Format
		opts   Options
		line   string
		reason string
		detail string // a substring of the detail
	}{
		// size, encoding and syntax, whatever the format
		{"too large", FormatAuto, Options{MaxEventBytes: 64}, `{` + ok + `,"decision":"allowed"}`, ReasonTooLarge, "over the limit of 64"},
		{"too large intercept", FormatIntercept, Options{MaxEventBytes: 10}, `{"type":"heartbeat","instance":"a"}`, ReasonTooLarge, "bytes"},
		{"not utf8", FormatAuto, Options{}, "{\"ts\":\"2026-11-03T09:00:00Z\",\"server\":\"s\xff\",\"tool\":\"t\",\"decision\":\"allowed\"}", ReasonNotUTF8, "byte 40"},
		{"not utf8 docker", FormatDocker, Options{}, "{\"server_name\":\"\xc3\x28\"}", ReasonNotUTF8, "UTF-8"},
		{"truncated", FormatAuto, Options{}, `{` + ok, ReasonMalformedJSON, "unterminated object"},
		{"not an object", FormatAuto, Options{}, `["ts"]`, ReasonMalformedJSON, "expected a JSON object, got an array"},
		{"two values", FormatAuto, Options{}, `{"a":"b"} {"c":"d"}`, ReasonMalformedJSON, "more than one JSON value"},
		{"trailing garbage", FormatNative, Options{}, `{"a":"b"}x`, ReasonMalformedJSON, "unexpected character"},
		{"single quotes", FormatAuto, Options{}, `{'ts':'x'}`, ReasonMalformedJSON, "expected a string key"},
		{"trailing comma", FormatAuto, Options{}, `{"a":1,}`, ReasonMalformedJSON, "expected a string key"},
		{"raw control char", FormatAuto, Options{}, "{\"a\":\"x\ty\"}", ReasonMalformedJSON, "control character"},
		{"bad escape", FormatAuto, Options{}, `{"a":"\x41"}`, ReasonMalformedJSON, "invalid escape"},
		{"bad number", FormatAuto, Options{}, `{"a":01}`, ReasonMalformedJSON, "expected , or }"},
		{"too deep", FormatAuto, Options{}, `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, ReasonMalformedJSON, "nested too deeply"},
		{"malformed intercept", FormatIntercept, Options{}, `{"type":"tool_call",`, ReasonMalformedJSON, "JSON"},
		{"cloudevents data string not JSON", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data":"{oops"}`, ReasonMalformedJSON, "CloudEvents data string"},

		// detection
		{"unknown format", FormatAuto, Options{}, `{"level":"info","msg":"started"}`, ReasonUnknownFormat, "specversion"},
		{"empty object", FormatAuto, Options{}, `{}`, ReasonUnknownFormat, "not a known event format"},
		{"unknown format option", Format("xml"), Options{}, `{}`, ReasonUnknownFormat, "allowed values are auto, native"},

		// missing_ts
		{"native no ts", FormatAuto, Options{}, `{"server":"s","tool":"t","decision":"allowed"}`, ReasonMissingTS, "RFC 3339"},
		{"native empty ts", FormatAuto, Options{}, `{"ts":"","server":"s","tool":"t","decision":"allowed"}`, ReasonMissingTS, "ts"},
		{"native null ts", FormatAuto, Options{}, `{"ts":null,"server":"s","tool":"t","decision":"allowed"}`, ReasonMissingTS, "ts"},
		{"cloudevents no ts no time", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data":{"server":"s","tool":"t","decision":"allowed"}}`, ReasonMissingTS, "ts"},
		{"intercept no ts", FormatAuto, Options{Server: "s"}, `{"type":"tool_call","instance":"a","tool":"t","result":"allowed"}`, ReasonMissingTS, "Intercept tool_call"},
		{"docker no timestamp", FormatAuto, Options{}, `{"server_name":"s","tool_name":"t","result":"allowed"}`, ReasonMissingTS, "docker"},

		// bad_ts
		{"native bad ts", FormatAuto, Options{}, `{"ts":"2026-11-03 09:00","server":"s","tool":"t","decision":"allowed"}`, ReasonBadTS, `"2026-11-03 09:00"`},
		{"native ts without zone", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00","server":"s","tool":"t","decision":"allowed"}`, ReasonBadTS, "RFC 3339"},
		{"native numeric ts", FormatAuto, Options{}, `{"ts":1793000000,"server":"s","tool":"t","decision":"allowed"}`, ReasonBadTS, "got a number"},
		{"native zero ts", FormatAuto, Options{}, `{"ts":"0001-01-01T00:00:00Z","server":"s","tool":"t","decision":"allowed"}`, ReasonBadTS, "RFC 3339"},
		{"cloudevents bad time", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","time":"yesterday","data":{"server":"s","tool":"t","decision":"allowed"}}`, ReasonBadTS, "CloudEvents"},
		{"intercept bad ts", FormatAuto, Options{Server: "s"}, `{"ts":"now","type":"tool_call","instance":"a","tool":"t","result":"allowed"}`, ReasonBadTS, "now"},
		{"docker bad timestamp", FormatAuto, Options{}, `{"server_name":"s","tool_name":"t","result":"allowed","timestamp":"12:00"}`, ReasonBadTS, "timestamp"},

		// missing_server
		{"native no server", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","tool":"t","decision":"allowed"}`, ReasonMissingServer, "--server NAME"},
		{"cloudevents no server", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","time":"2026-11-03T09:00:00Z","data":{"tool":"t","decision":"allowed"}}`, ReasonMissingServer, "server"},
		{"docker no server", FormatDocker, Options{}, `{"tool_name":"t","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`, ReasonMissingServer, "docker"},

		// missing_tool
		{"native no tool", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"s","decision":"allowed"}`, ReasonMissingTool, "tools/call"},
		{"native explicit tools/call", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"s","method":"tools/call","tool":"","decision":"allowed"}`, ReasonMissingTool, "tool"},
		{"intercept no tool", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","result":"allowed"}`, ReasonMissingTool, "tool"},
		{"docker no tool", FormatAuto, Options{}, `{"server_name":"s","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`, ReasonMissingTool, "tool"},

		// bad_decision
		{"native no decision", FormatAuto, Options{}, `{` + ok + `}`, ReasonBadDecision, "no decision: want one of allowed, denied, rate_limited, approval_required, hidden"},
		{"native unknown decision", FormatAuto, Options{}, `{` + ok + `,"decision":"Allowed"}`, ReasonBadDecision, `unknown decision "Allowed"`},
		{"cloudevents bad decision", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","time":"2026-11-03T09:00:00Z","data":{"server":"s","tool":"t","decision":"ok"}}`, ReasonBadDecision, "ok"},
		{"intercept bad result", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t","result":"blocked"}`, ReasonBadDecision, "blocked"},
		{"intercept no result", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t"}`, ReasonBadDecision, "no decision"},
		{"docker no result", FormatDocker, Options{}, `{"server_name":"s","tool_name":"t","timestamp":"2026-11-06T12:00:00Z"}`, ReasonBadDecision, "no decision"},

		// field_too_long
		{"native long reason", FormatAuto, Options{}, `{` + ok + `,"decision":"denied","reason":"` + long + `"}`, ReasonFieldTooLong, `"reason" is 1025 bytes, over the limit of 1024`},
		{"native long id", FormatAuto, Options{}, `{` + ok + `,"decision":"denied","id":"` + strings.Repeat("i", 129) + `"}`, ReasonFieldTooLong, `"id" is 129 bytes, over the limit of 128`},
		{"native long attr", FormatAuto, Options{}, `{` + ok + `,"decision":"denied","note":"` + long + `"}`, ReasonFieldTooLong, `"attrs.note"`},
		{"native long arg key", FormatAuto, Options{}, `{` + ok + `,"decision":"denied","args":{"` + long + `":1}}`, ReasonFieldTooLong, `"arg_keys"`},
		{"native custom limit", FormatAuto, Options{MaxFieldBytes: 8}, `{` + ok + `,"decision":"denied"}`, ReasonFieldTooLong, `"server" is 11 bytes, over the limit of 8`},
		{"cloudevents long tool", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","time":"2026-11-03T09:00:00Z","data":{"server":"s","tool":"` + long + `","decision":"allowed"}}`, ReasonFieldTooLong, `"tool"`},
		{"intercept long message", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t","result":"denied","message":"` + long + `"}`, ReasonFieldTooLong, `"reason"`},
		{"intercept long startup server", FormatAuto, Options{}, `{"type":"startup","instance":"a","server":"` + long + `"}`, ReasonFieldTooLong, `"server"`},
		{"docker long session", FormatAuto, Options{}, `{"server_name":"s","tool_name":"t","result":"allowed","timestamp":"2026-11-06T12:00:00Z","session_id":"` + long + `"}`, ReasonFieldTooLong, `"session"`},

		// bad_field
		{"latency as string", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","latency_ms":"12"}`, ReasonBadField, `"latency_ms" must be a number, got a string`},
		{"negative latency", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","latency_ms":-1}`, ReasonBadField, "non-negative"},
		{"huge latency", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","latency_ms":1e999}`, ReasonBadField, "out of range"},
		{"fractional error_code", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","error_code":1.5}`, ReasonBadField, "want an integer"},
		{"error_code as string", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","error_code":"-32000"}`, ReasonBadField, "got a string"},
		{"server as number", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":7,"tool":"t","decision":"allowed"}`, ReasonBadField, `"server" must be a string, got a number`},
		{"decision as bool", FormatAuto, Options{}, `{` + ok + `,"decision":true}`, ReasonBadField, `"decision" must be a string`},
		{"unknown status", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","status":"timeout"}`, ReasonBadField, `"ok", "error" or empty`},
		{"args as array", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","args":[1]}`, ReasonBadField, `"args" must be an object`},
		{"attrs as string", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","attrs":"x"}`, ReasonBadField, `"attrs" must be an object`},
		{"arg_keys of numbers", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","arg_keys":["a",1]}`, ReasonBadField, `"arg_keys" must be an array of strings`},
		{"request_id as object", FormatAuto, Options{}, `{` + ok + `,"decision":"allowed","request_id":{}}`, ReasonBadField, `"request_id" must be a string or a number`},
		{"server ..", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"..","tool":"t","decision":"allowed"}`, ReasonBadField, `"server" is "..": a relative path`},
		{"server .", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":".","tool":"t","decision":"allowed"}`, ReasonBadField, "a relative path"},
		{"server leading dot", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":".hidden","tool":"t","decision":"allowed"}`, ReasonBadField, "start or end with a dot"},
		{"server trailing dot", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"a.","tool":"t","decision":"allowed"}`, ReasonBadField, "start or end with a dot"},
		{"server empty part", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"a..b","tool":"t","decision":"allowed"}`, ReasonBadField, "two in a row"},
		{"server traversal", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"../../etc","tool":"t","decision":"allowed"}`, ReasonBadField, "start or end with a dot"},
		{"server path", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"a/b","tool":"t","decision":"allowed"}`, ReasonBadField, "path separator"},
		{"server backslash", FormatDocker, Options{}, `{"server_name":"a\\b","tool_name":"t","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`, ReasonBadField, "path separator"},
		{"server wildcard", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"a*","tool":"t","decision":"allowed"}`, ReasonBadField, "wildcard"},
		{"server subject tail", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":">","tool":"t","decision":"allowed"}`, ReasonBadField, "wildcard"},
		{"server space", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"my server","tool":"t","decision":"allowed"}`, ReasonBadField, "white space"},
		{"server NUL", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"a\u0000","tool":"t","decision":"allowed"}`, ReasonBadField, "control character"},
		{"server escape", FormatCloudEvents, Options{}, `{"specversion":"1.0","id":"1","time":"2026-11-03T09:00:00Z","data":{"server":"a\u001b[2J","tool":"t","decision":"allowed"}}`, ReasonBadField, "control character"},
		{"server from --server", FormatAuto, Options{Server: ".."}, `{` + ok + `,"decision":"allowed"}`, ReasonBadField, "a relative path"},
		{"server from intercept --server", FormatIntercept, Options{Server: "a/b"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t","result":"allowed"}`, ReasonBadField, "path separator"},
		{"tool newline", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"a\n| b |","decision":"allowed"}`, ReasonBadField, `"tool" is "a\n| b |": a tool name cannot hold a control character`},
		{"tool escape", FormatDocker, Options{}, `{"server_name":"s","tool_name":"t\u001b]0;x\u0007","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`, ReasonBadField, "control character"},
		{"tool C1", FormatAuto, Options{}, `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t\u009b","decision":"allowed"}`, ReasonBadField, "control character"},
		{"tool bidi override", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t\u202e","result":"allowed"}`, ReasonBadField, "control character"},
		{"cloudevents no specversion", FormatCloudEvents, Options{}, `{"id":"1","data":{}}`, ReasonBadField, "no \"specversion\""},
		{"cloudevents old specversion", FormatAuto, Options{}, `{"specversion":"0.3","id":"1","data":{}}`, ReasonBadField, "want 1.0"},
		{"cloudevents no data", FormatCloudEvents, Options{}, `{"specversion":"1.0","id":"1"}`, ReasonBadField, "no \"data\""},
		{"cloudevents data number", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data":42}`, ReasonBadField, "v1 event object"},
		{"cloudevents bad base64", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data_base64":"%%%"}`, ReasonBadField, "base64"},
		{"cloudevents base64 not utf8", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data_base64":"` + b64("{\"a\":\"\xff\"}") + `"}`, ReasonNotUTF8, "data_base64"},
		{"cloudevents base64 not JSON", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","data_base64":"` + b64("nope") + `"}`, ReasonMalformedJSON, "data_base64"},
		{"cloudevents data field type", FormatAuto, Options{}, `{"specversion":"1.0","id":"1","time":"2026-11-03T09:00:00Z","data":{"server":"s","tool":"t","decision":"allowed","latency_ms":"x"}}`, ReasonBadField, "CloudEvents data: "},
		{"intercept no type", FormatIntercept, Options{}, `{"instance":"a","tool":"t"}`, ReasonBadField, `no "type"`},
		{"intercept type number", FormatIntercept, Options{}, `{"type":1,"instance":"a"}`, ReasonBadField, `"type" must be a string`},
		{"intercept startup no instance", FormatIntercept, Options{}, `{"type":"startup","server":"npx"}`, ReasonBadField, "instance"},
		{"intercept rule number", FormatAuto, Options{Server: "s"}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t","result":"denied","rule":5}`, ReasonBadField, `"rule"`},
		{"docker target_type number", FormatDocker, Options{}, `{"target_type":1,"server_name":"s"}`, ReasonBadField, "target_type"},
		{"docker client_name object", FormatAuto, Options{}, `{"server_name":"s","tool_name":"t","result":"allowed","timestamp":"2026-11-06T12:00:00Z","client_name":{}}`, ReasonBadField, `"client_name"`},

		// explicit formats that do not fit get a hint
		{"native for an intercept line", FormatNative, Options{}, `{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"a","tool":"t","result":"allowed"}`, ReasonMissingServer, "try --format intercept"},
		{"docker for a native line", FormatDocker, Options{}, `{` + ok + `,"decision":"allowed"}`, ReasonMissingTS, "looks like native"},
		{"intercept for a cloudevent", FormatIntercept, Options{}, `{"specversion":"1.0","id":"1","data":{}}`, ReasonBadField, "try --format cloudevents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Format = tc.format
			res, err := Decode([]byte(tc.line), opts)
			require.Error(t, err)
			var rej *Rejection
			require.ErrorAs(t, err, &rej)
			assert.Equal(t, tc.reason, rej.Reason, rej.Detail)
			assert.Equal(t, tc.reason, ReasonOf(err))
			assert.Contains(t, rej.Detail, tc.detail)
			assert.True(t, strings.HasPrefix(err.Error(), tc.reason+": "))
			assert.Equal(t, Kind(0), res.Kind)
			assert.NotEmpty(t, res.Format)
		})
	}
}

// TestEveryReasonIsTested keeps the table above complete when a reason is added.
func TestEveryReasonIsTested(t *testing.T) {
	seen := map[string]bool{}
	lines := map[string]string{
		ReasonTooLarge:      strings.Repeat(" ", 10) + `{"a":"` + strings.Repeat("b", 70000) + `"}`,
		ReasonNotUTF8:       "{\"a\":\"\xff\"}",
		ReasonMalformedJSON: `{`,
		ReasonUnknownFormat: `{"a":"b"}`,
		ReasonMissingTS:     `{"server":"s","tool":"t","decision":"allowed"}`,
		ReasonBadTS:         `{"ts":"x","server":"s","tool":"t","decision":"allowed"}`,
		ReasonMissingServer: `{"ts":"2026-11-03T09:00:00Z","tool":"t","decision":"allowed"}`,
		ReasonMissingTool:   `{"ts":"2026-11-03T09:00:00Z","server":"s","decision":"allowed"}`,
		ReasonBadDecision:   `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t"}`,
		ReasonFieldTooLong:  `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","grant":"` + strings.Repeat("g", 2000) + `"}`,
		ReasonBadField:      `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","status":"maybe"}`,
	}
	for reason, line := range lines {
		_, err := Decode([]byte(line), Options{})
		assert.Equal(t, reason, ReasonOf(err), line[:min(len(line), 80)])
		seen[ReasonOf(err)] = true
	}
	for _, r := range Reasons {
		if r == ReasonSubjectMismatch {
			continue // ingest's check of a NATS subject, not the payload's
		}
		assert.True(t, seen[r], "reason %s has no test line", r)
	}
}

// TestNamesAccepted: dotted server names (a NATS subject takes their parts
// as tokens) and tool names with any printable character are accepted.
func TestNamesAccepted(t *testing.T) {
	for _, tc := range []struct{ server, tool string }{
		{"github.com", "get_vm_status"},
		{"proxmox-mcp", "a|b `c` <d> [e](f)"},
		{"mcp_server:8080@host", "ünïcode ✓ tool"},
		{"a.b.c", "x\u200dy"},
	} {
		line, err := json.Marshal(map[string]string{"ts": "2026-11-03T09:00:00Z", "server": tc.server, "tool": tc.tool, "decision": "allowed"})
		require.NoError(t, err)
		res, err := Decode(line, Options{})
		require.NoError(t, err, "%s / %s", tc.server, tc.tool)
		assert.Equal(t, tc.server, res.Event.Server)
		assert.Equal(t, tc.tool, res.Event.Tool)
	}
}
