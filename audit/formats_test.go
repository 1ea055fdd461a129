package audit

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeCloudEvents(t *testing.T) {
	v1 := `{"server":"proxmox-mcp","tool":"get_vm_status","decision":"allowed","session":"s-1","args":{"vmid":101}}`
	env := func(extra string) string {
		return `{"specversion":"1.0","type":"dev.mcptrail.audit.v1","source":"/gw/1","id":"ce-1","time":"2026-11-04T08:00:00.5+02:00"` + extra + `}`
	}
	ceTime := time.Date(2026, 11, 4, 6, 0, 0, 500000000, time.UTC)
	for _, tc := range []struct {
		name  string
		line  string
		check func(t *testing.T, e Event)
	}{
		{"source, id and time fill the event", env(`,"data":` + v1), func(t *testing.T, e Event) {
			assert.Equal(t, "/gw/1 ce-1", e.ID)
			assert.Equal(t, ceTime, e.TS)
			assert.Equal(t, "proxmox-mcp", e.Server)
			assert.Equal(t, "s-1", e.Session)
			assert.Equal(t, []string{"vmid"}, e.ArgKeys)
		}},
		{"the event's own id and ts win", env(`,"data":{"id":"own","ts":"2026-11-04T05:59:59Z","server":"s","tool":"t","decision":"denied"}`), func(t *testing.T, e Event) {
			assert.Equal(t, "own", e.ID)
			assert.Equal(t, time.Date(2026, 11, 4, 5, 59, 59, 0, time.UTC), e.TS)
			assert.Equal(t, Denied, e.Decision)
		}},
		{"data as a JSON string", env(`,"datacontenttype":"application/json","data":` + jsonString(v1)), func(t *testing.T, e Event) {
			assert.Equal(t, "get_vm_status", e.Tool)
			assert.Equal(t, "/gw/1 ce-1", e.ID)
		}},
		{"data_base64", env(`,"data_base64":"` + base64.StdEncoding.EncodeToString([]byte(v1)) + `"`), func(t *testing.T, e Event) {
			assert.Equal(t, "get_vm_status", e.Tool)
			assert.Equal(t, ceTime, e.TS)
		}},
		{"no CloudEvents id: derived", `{"specversion":"1.0","time":"2026-11-04T08:00:00Z","data":` + v1 + `}`, func(t *testing.T, e Event) {
			assert.Regexp(t, `^sha256:[0-9a-f]{32}$`, e.ID)
		}},
		{"a source that is no string: left aside", `{"specversion":"1.0","source":123,"id":"ce-1","time":"2026-11-04T08:00:00Z","data":` + v1 + `}`, func(t *testing.T, e Event) {
			assert.Equal(t, "ce-1", e.ID)
		}},
		{"no source: the envelope's id", `{"specversion":"1.0","id":"ce-1","time":"2026-11-04T08:00:00Z","data":` + v1 + `}`, func(t *testing.T, e Event) {
			assert.Equal(t, "ce-1", e.ID)
		}},
		{"a source and id longer than an id together: their hash", `{"specversion":"1.0","source":"https://gateway.example.com/` + strings.Repeat("x", 100) + `","id":"ce-1","time":"2026-11-04T08:00:00Z","data":` + v1 + `}`, func(t *testing.T, e Event) {
			assert.Regexp(t, `^ce:sha256:[0-9a-f]{32}$`, e.ID)
		}},
		{"unknown data fields go to attrs, envelope fields do not", env(`,"subject":"x","data":{"server":"s","tool":"t","decision":"allowed","region":"eu"}`), func(t *testing.T, e Event) {
			assert.Equal(t, map[string]string{"region": "eu"}, e.Attrs)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []Format{FormatAuto, FormatCloudEvents} {
				res, err := Decode([]byte(tc.line), Options{Format: f})
				require.NoError(t, err)
				require.Equal(t, KindEvent, res.Kind)
				assert.Equal(t, FormatCloudEvents, res.Format)
				require.NoError(t, res.Event.Validate(Options{}))
				tc.check(t, res.Event)
			}
		})
	}
	e := decodeEvent(t, env(`,"data":`+v1), Options{Server: "renamed"})
	assert.Equal(t, "renamed", e.Server)
}

// CloudEvents makes only source and id together unique: two gateways that
// number their events alike give events of different ids, and an event
// sent again keeps its id. The forms cannot meet: a source with a space
// takes the hash.
func TestCloudEventsIDsOfTwoSources(t *testing.T) {
	ev := func(source, id string) string {
		return `{"specversion":"1.0","source":"` + source + `","id":"` + id + `","time":"2026-11-04T08:00:00Z","data":{"server":"s","tool":"t","decision":"allowed"}}`
	}
	id := func(line string) string { return decodeEvent(t, line, Options{}).ID }
	assert.NotEqual(t, id(ev("/gateways/eu-1", "1")), id(ev("/gateways/eu-2", "1")))
	assert.Equal(t, id(ev("/gateways/eu-1", "1")), id(ev("/gateways/eu-1", "1")))
	assert.NotEqual(t, id(ev("a b", "c")), id(ev("a", "b c")))
	assert.Regexp(t, `^ce:sha256:`, id(ev("a b", "c")))
	long := strings.Repeat("s", MaxIDBytes-2)
	assert.Equal(t, long+" 1", id(ev(long, "1")), "the readable form up to MaxIDBytes")
	assert.Regexp(t, `^ce:sha256:`, id(ev(long, "12")))
}

func jsonString(s string) string {
	b := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}

func TestDecodeIntercept(t *testing.T) {
	const hash = "sha256:18da6ac8fc23043448cc9f3e5e8731d70e5670b91f1e97c18fdc573fc4f97b12"
	call := func(rest string) string {
		return `{"ts":"2026-11-05T08:00:00.412345678Z","type":"tool_call","instance":"9f3a01bc","tool":"get_vm_status"` + rest + `}`
	}
	for _, tc := range []struct {
		name     string
		line     string
		decision Decision
		rule     string
		reason   string
	}{
		{"allowed", call(`,"result":"allowed","args_hash":"` + hash + `"`), Allowed, "", ""},
		{"denied by a rule", call(`,"result":"denied","rule":"no deletes","message":"Deleting VMs is not allowed"`), Denied, "no deletes", "Deleting VMs is not allowed"},
		{"default deny", call(`,"result":"denied","rule":"(default deny)","message":"Tool get_vm_status is not allowed"`), Denied, "(default deny)", "Tool get_vm_status is not allowed"},
		{"hidden", call(`,"result":"denied","rule":"(hidden)","message":"hidden"`), Hidden, "(hidden)", "hidden"},
		{"rate limit at reservation", call(`,"result":"denied","message":"Rate limit exceeded for status polling"`), RateLimited, "", "Rate limit exceeded for status polling"},
		{"rate limit, any case", call(`,"result":"denied","message":"RATE LIMIT of 20 per minute reached. Try again later."`), RateLimited, "", "RATE LIMIT of 20 per minute reached. Try again later."},
		{"rate limit with its own on_deny", call(`,"result":"denied","message":"Polling is capped; wait for the task"`), RateLimited, "", "Polling is capped; wait for the task"},
		{"a named rule's message stays a denial", call(`,"result":"denied","rule":"poll cap","message":"Rate limit of 20 per minute reached."`), Denied, "poll cap", "Rate limit of 20 per minute reached."},
		{"a failed reservation is no rate limit", call(`,"result":"denied","message":"Internal policy error"`), Denied, "", "Internal policy error"},
		{"a later decision value", call(`,"result":"approval_required"`), ApprovalRequired, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Decode([]byte(tc.line), Options{})
			require.NoError(t, err)
			require.Equal(t, KindEvent, res.Kind)
			assert.Equal(t, FormatIntercept, res.Format)
			e := res.Event
			assert.Equal(t, tc.decision, e.Decision)
			assert.Equal(t, tc.rule, e.Rule)
			assert.Equal(t, tc.reason, e.Reason)
			assert.Equal(t, "9f3a01bc", e.Gateway)
			assert.Equal(t, "get_vm_status", e.Tool)
			assert.Equal(t, "tools/call", e.Method)
			assert.Equal(t, time.Date(2026, 11, 5, 8, 0, 0, 412345678, time.UTC), e.TS)
			assert.Empty(t, e.Server, "resolved later by InterceptServers")
			assert.Equal(t, DerivedID([]byte(tc.line)), e.ID)
			if tc.name == "allowed" {
				assert.Equal(t, hash, e.ArgsHash)
				assert.Nil(t, e.ArgKeys, "Intercept records no argument keys")
			}
			named, err := Decode([]byte(tc.line), Options{Format: FormatIntercept, Server: "proxmox-mcp"})
			require.NoError(t, err)
			assert.Equal(t, "proxmox-mcp", named.Event.Server)
			require.NoError(t, named.Event.Validate(Options{}))
		})
	}

	t.Run("startup", func(t *testing.T) {
		res, err := Decode([]byte(`{"ts":"2026-11-05T07:59:58Z","type":"startup","instance":"9f3a01bc","server":"npx","config":"/etc/p.yaml","pid":4,"state_backend":"redis://u:secret@h","fail_mode":"closed"}`), Options{})
		require.NoError(t, err)
		assert.Equal(t, Result{Kind: KindInterceptStartup, Format: FormatIntercept, Instance: "9f3a01bc", InstanceServer: "npx"}, res)
	})
	for _, typ := range []string{"heartbeat", "shutdown", "config_reload", "approval_requested", "something_new"} {
		t.Run("skips "+typ, func(t *testing.T) {
			// fields of unexpected types do not matter on a skipped line
			res, err := Decode([]byte(`{"ts":"2026-11-05T08:01:00Z","type":"`+typ+`","instance":"9f3a01bc","counters":{"a.b":1},"message":7}`), Options{})
			require.NoError(t, err)
			assert.Equal(t, KindSkipped, res.Kind)
			assert.Equal(t, typ, res.Skipped)
			assert.Equal(t, FormatIntercept, res.Format)
		})
	}
	t.Run("unknown string fields go to attrs", func(t *testing.T) {
		e := decodeEvent(t, call(`,"result":"allowed","agent_hint":"claude","pid":5`), Options{Server: "s"})
		assert.Equal(t, map[string]string{"agent_hint": "claude"}, e.Attrs)
	})
}

func TestDecodeDocker(t *testing.T) {
	line := `{"trigger":"tools/call","target_type":"tool","server_name":"proxmox-mcp","tool_name":"delete_vm","catalog_name":"docker-mcp",` +
		`"result":"denied","outcome_reason":"policy_rule","reason":"delete_vm is blocked","policy_id":"no-destructive","policy_version":"3",` +
		`"policy_source":"org","client_name":"cursor","client_version":"1.2","session_id":"d-2","trace_id":"t-1","actor_id":"u-1",` +
		`"actor":{"id":"u-1"},"timestamp":"2026-11-06T12:01:00Z"}`
	e := decodeEvent(t, line, Options{Format: FormatDocker})
	assert.Equal(t, Event{
		ID:            DerivedID([]byte(line)),
		TS:            time.Date(2026, 11, 6, 12, 1, 0, 0, time.UTC),
		Server:        "proxmox-mcp",
		Tool:          "delete_vm",
		Method:        "tools/call",
		Decision:      Denied,
		Agent:         "cursor",
		Session:       "d-2",
		Rule:          "no-destructive",
		Reason:        "delete_vm is blocked",
		PolicyVersion: "3",
		Attrs: map[string]string{
			"trigger": "tools/call", "catalog_name": "docker-mcp", "policy_source": "org", "client_version": "1.2",
			"trace_id": "t-1", "actor_id": "u-1", "outcome_reason": "policy_rule",
		},
	}, e)
	assert.Equal(t, e, decodeEvent(t, line, Options{}), "auto-detected")

	t.Run("outcome_reason when there is no reason text", func(t *testing.T) {
		e := decodeEvent(t, `{"server_name":"s","tool_name":"t","result":"denied","outcome_reason":"policy_error","timestamp":"2026-11-06T12:00:00Z"}`, Options{})
		assert.Equal(t, "policy_error", e.Reason)
		assert.Nil(t, e.Attrs)
	})
	t.Run("numeric policy version", func(t *testing.T) {
		e := decodeEvent(t, `{"server_name":"s","tool_name":"t","result":"allowed","policy_version":3,"timestamp":"2026-11-06T12:00:00Z"}`, Options{})
		assert.Equal(t, "3", e.PolicyVersion)
	})
	t.Run("--server renames", func(t *testing.T) {
		e := decodeEvent(t, line, Options{Server: "pve-prod"})
		assert.Equal(t, "pve-prod", e.Server)
	})
	for _, tt := range []string{"server", "prompt"} {
		t.Run("skips target_type "+tt, func(t *testing.T) {
			res, err := Decode([]byte(`{"target_type":"`+tt+`","server_name":"s","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`), Options{})
			require.NoError(t, err)
			assert.Equal(t, KindSkipped, res.Kind)
			assert.Equal(t, FormatDocker, res.Format)
			assert.Equal(t, "target_type "+tt, res.Skipped)
		})
	}
}

func TestInterceptServers(t *testing.T) {
	lines := []string{
		`{"ts":"2026-11-05T07:59:00Z","type":"tool_call","instance":"aaaa0000","tool":"t","result":"allowed"}`, // before any startup
		`{"ts":"2026-11-05T07:59:58Z","type":"startup","instance":"aaaa0000","server":"npx"}`,
		`{"ts":"2026-11-05T08:00:00Z","type":"tool_call","instance":"aaaa0000","tool":"t","result":"allowed"}`,
		`{"ts":"2026-11-05T08:00:01Z","type":"tool_call","instance":"bbbb1111","tool":"t","result":"allowed"}`, // unknown instance
		`{"ts":"2026-11-05T08:00:02Z","type":"startup","instance":"bbbb1111"}`,                                 // no server named
		`{"ts":"2026-11-05T08:00:03Z","type":"tool_call","instance":"bbbb1111","tool":"t","result":"allowed"}`,
		`{"ts":"2026-11-05T08:00:04Z","type":"heartbeat","instance":"aaaa0000"}`,
		`{"ts":"2026-11-05T08:00:05Z","server":"native-srv","tool":"t","decision":"allowed"}`,
	}
	type outcome struct {
		kind   Kind
		server string
		reason string
	}
	run := func(opts Options) []outcome {
		var r InterceptServers
		var out []outcome
		for _, l := range lines {
			res, err := Decode([]byte(l), opts)
			require.NoError(t, err, l)
			err = r.Apply(&res, opts)
			out = append(out, outcome{res.Kind, res.Event.Server, ReasonOf(err)})
		}
		return out
	}
	assert.Equal(t, []outcome{
		{KindEvent, "", ReasonMissingServer},
		{KindInterceptStartup, "", ""},
		{KindEvent, "npx", ""},
		{KindEvent, "", ReasonMissingServer},
		{KindInterceptStartup, "", ""},
		{KindEvent, "", ReasonMissingServer},
		{KindSkipped, "", ""},
		{KindEvent, "native-srv", ""},
	}, run(Options{}))
	named := run(Options{Server: "proxmox-mcp"})
	for i, o := range named {
		if o.kind == KindEvent {
			assert.Equal(t, "proxmox-mcp", o.server, i)
			assert.Empty(t, o.reason, i)
		}
	}

	var r InterceptServers
	res, err := Decode([]byte(lines[3]), Options{})
	require.NoError(t, err)
	err = r.Apply(&res, Options{})
	assert.ErrorContains(t, err, `no startup line for Intercept instance "bbbb1111"`)
	assert.ErrorContains(t, err, "pass --server NAME")
	_, ok := r.Server("bbbb1111")
	assert.False(t, ok)
}
