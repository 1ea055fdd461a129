package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

// decodeEvent decodes line and requires an event.
func decodeEvent(t *testing.T, line string, opts Options) Event {
	t.Helper()
	res, err := Decode([]byte(line), opts)
	require.NoError(t, err, line)
	require.Equal(t, KindEvent, res.Kind, line)
	return res.Event
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestDecodeNativeFull(t *testing.T) {
	line := `{"id":"evt-1","ts":"2026-11-03T10:00:00.123456789+01:00","server":"proxmox-mcp","tool":"vm_agent_exec",` +
		`"method":"tools/call","decision":"allowed","status":"ok","gateway":"gw-1","grant":"ops","agent":"claude",` +
		`"session":"s-1","request_id":"r-9","rule":"/tools/vm_agent_exec","reason":"ok by policy","error_code":-32603,` +
		`"latency_ms":12.5,"args":{"vmid":101,"node":"pve1"},"policy_version":"7","attrs":{"trace_id":"abc","n":1}}`
	e := decodeEvent(t, line, Options{StoreArgs: true})
	canon := `{"node":"pve1","vmid":101}`
	assert.Equal(t, Event{
		ID:            "evt-1",
		TS:            time.Date(2026, 11, 3, 9, 0, 0, 123456789, time.UTC),
		Server:        "proxmox-mcp",
		Tool:          "vm_agent_exec",
		Method:        "tools/call",
		Decision:      Allowed,
		Status:        "ok",
		Gateway:       "gw-1",
		Grant:         "ops",
		Agent:         "claude",
		Session:       "s-1",
		RequestID:     "r-9",
		Rule:          "/tools/vm_agent_exec",
		Reason:        "ok by policy",
		ErrorCode:     ptr(int64(-32603)),
		LatencyMS:     ptr(12.5),
		ArgsHash:      sha([]byte(canon)),
		ArgKeys:       []string{"node", "vmid"},
		Args:          json.RawMessage(canon),
		PolicyVersion: "7",
		Attrs:         map[string]string{"trace_id": "abc"},
	}, e)
	assert.Equal(t, time.UTC, e.TS.Location())
}

func TestDecodeNativeRules(t *testing.T) {
	base := `"ts":"2026-11-03T09:00:00Z","server":"proxmox-mcp","decision":"allowed"`
	for _, tc := range []struct {
		name  string
		line  string
		opts  Options
		check func(t *testing.T, e Event)
	}{
		{"method defaults to tools/call", `{` + base + `,"tool":"get_vm_status"}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, "tools/call", e.Method) }},
		{"tool optional for other methods", `{` + base + `,"method":"tools/list"}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, "tools/list", e.Method); assert.Empty(t, e.Tool) }},
		{"--server renames", `{` + base + `,"tool":"x"}`, Options{Server: "pve-prod"},
			func(t *testing.T, e Event) { assert.Equal(t, "pve-prod", e.Server) }},
		{"--server supplies a missing server", `{"ts":"2026-11-03T09:00:00Z","decision":"denied","tool":"x"}`, Options{Server: "pve"},
			func(t *testing.T, e Event) { assert.Equal(t, "pve", e.Server) }},
		{"unknown string fields go to attrs, others are ignored", `{` + base + `,"tool":"x","client":"cursor","retries":2,"extra":{"a":"b"},"flag":true}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, map[string]string{"client": "cursor"}, e.Attrs) }},
		{"explicit attrs win over top-level fields", `{` + base + `,"tool":"x","region":"top","attrs":{"region":"attrs","zone":"z","n":3}}`, Options{},
			func(t *testing.T, e Event) {
				assert.Equal(t, map[string]string{"region": "attrs", "zone": "z"}, e.Attrs)
			}},
		{"empty attrs is nil", `{` + base + `,"tool":"x","attrs":{}}`, Options{},
			func(t *testing.T, e Event) { assert.Nil(t, e.Attrs) }},
		{"nulls are absent", `{` + base + `,"tool":"x","status":null,"latency_ms":null,"error_code":null,"args":null,"attrs":null,"arg_keys":null}`, Options{},
			func(t *testing.T, e Event) {
				assert.Empty(t, e.Status)
				assert.Nil(t, e.LatencyMS)
				assert.Nil(t, e.ErrorCode)
				assert.Empty(t, e.ArgsHash)
			}},
		{"numeric request_id keeps its text", `{` + base + `,"tool":"x","request_id":17}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, "17", e.RequestID) }},
		{"args_hash and arg_keys kept without args", `{` + base + `,"tool":"x","args_hash":"sha256:abcd","arg_keys":["vmid","node"]}`, Options{},
			func(t *testing.T, e Event) {
				assert.Equal(t, "sha256:abcd", e.ArgsHash)
				assert.Equal(t, []string{"node", "vmid"}, e.ArgKeys)
			}},
		{"args override a carried args_hash", `{` + base + `,"tool":"x","args_hash":"sha256:abcd","arg_keys":["old"],"args":{"b":1}}`, Options{},
			func(t *testing.T, e Event) {
				assert.Equal(t, sha([]byte(`{"b":1}`)), e.ArgsHash)
				assert.Equal(t, []string{"b"}, e.ArgKeys)
			}},
		{"args dropped unless StoreArgs", `{` + base + `,"tool":"x","args":{"password":"hunter2"}}`, Options{},
			func(t *testing.T, e Event) { assert.Nil(t, e.Args); assert.NotEmpty(t, e.ArgsHash) }},
		{"empty args object", `{` + base + `,"tool":"x","args":{}}`, Options{StoreArgs: true},
			func(t *testing.T, e Event) {
				assert.Equal(t, sha([]byte(`{}`)), e.ArgsHash)
				assert.Nil(t, e.ArgKeys)
				assert.Equal(t, json.RawMessage(`{}`), e.Args)
			}},
		{"escaped strings are decoded", `{` + base + `,"tool":"get_\u0076m_status","reason":"line\nbreak \"q\" \ud83d\ude00"}`, Options{},
			func(t *testing.T, e Event) {
				assert.Equal(t, "get_vm_status", e.Tool)
				assert.Equal(t, "line\nbreak \"q\" 😀", e.Reason)
			}},
		{"the last duplicate key wins", `{` + base + `,"tool":"a","tool":"b"}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, "b", e.Tool) }},
		{"white space around the line and inside", " \t{ \"ts\" : \"2026-11-03T09:00:00Z\" , \"server\":\"s\", \"tool\":\"t\",\"decision\":\"denied\" }\r\n", Options{},
			func(t *testing.T, e Event) { assert.Equal(t, Denied, e.Decision) }},
		{"every decision", `{` + base[:len(base)-len(`"allowed"`)] + `"approval_required","tool":"x"}`, Options{},
			func(t *testing.T, e Event) { assert.Equal(t, ApprovalRequired, e.Decision) }},
		{"status error with code", `{` + base + `,"tool":"x","status":"error","error_code":-32000,"latency_ms":0}`, Options{},
			func(t *testing.T, e Event) {
				assert.Equal(t, "error", e.Status)
				assert.Equal(t, int64(-32000), *e.ErrorCode)
				assert.Equal(t, 0.0, *e.LatencyMS)
			}},
		{"id at the 128-byte limit", `{` + base + `,"tool":"x","id":"` + strings.Repeat("i", 128) + `"}`, Options{},
			func(t *testing.T, e Event) { assert.Len(t, e.ID, 128) }},
		{"field at the limit", `{` + base + `,"tool":"x","reason":"` + strings.Repeat("r", 1024) + `"}`, Options{},
			func(t *testing.T, e Event) { assert.Len(t, e.Reason, 1024) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Format = FormatNative
			e := decodeEvent(t, tc.line, opts)
			require.NoError(t, e.Validate(opts))
			tc.check(t, e)
			// auto-detection gives the same event
			opts.Format = FormatAuto
			assert.Equal(t, e, decodeEvent(t, tc.line, opts))
		})
	}
}

func TestDecodeBlankLine(t *testing.T) {
	for _, line := range []string{"", "   ", "\r\n", "\t \n"} {
		res, err := Decode([]byte(line), Options{Format: FormatNative})
		require.NoError(t, err)
		assert.Equal(t, KindSkipped, res.Kind)
		assert.Equal(t, "blank", res.Skipped)
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Format
	}{
		{`{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed"}`, FormatNative},
		{`{"decision":"allowed"}`, FormatNative},
		{`{"specversion":"1.0","id":"1","data":{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed"}}`, FormatCloudEvents},
		{`{"specversion":"1.0","id":"1","data_base64":"e30="}`, FormatCloudEvents},
		{`{"type":"heartbeat","instance":"9f3a01bc","ts":"2026-11-05T08:00:00Z"}`, FormatIntercept},
		{`{"server_name":"s","tool_name":"t","result":"allowed","timestamp":"2026-11-06T12:00:00Z"}`, FormatDocker},
		{`{"tool_name":"t","timestamp":"2026-11-06T12:00:00Z"}`, FormatDocker},
		// a CloudEvents envelope with a "type" but no instance is not Intercept
		{`{"specversion":"1.0","type":"x","data":{}}`, FormatCloudEvents},
		// Intercept's own "tool" and "ts" do not make it native
		{`{"type":"tool_call","instance":"a","tool":"t","ts":"2026-11-05T08:00:00Z","result":"allowed"}`, FormatIntercept},
		// a v1 event whose unknown fields are named as Intercept's or
		// docker's is still one: only it has a decision
		{`{"id":"e1","ts":"2026-11-05T08:00:00Z","server":"s","tool":"t","decision":"allowed","type":"audit","instance":"gw-1"}`, FormatNative},
		{`{"id":"e1","ts":"2026-11-05T08:00:00Z","server":"s","tool":"t","decision":"allowed","tool_name":"t","result":"ok"}`, FormatNative},
	} {
		res, _ := Decode([]byte(tc.line), Options{Server: "s"})
		assert.Equal(t, tc.want, res.Format, tc.line)
	}
}

func TestDerivedID(t *testing.T) {
	line := `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"get_vm_status","decision":"allowed"}`
	e1 := decodeEvent(t, line, Options{})
	e2 := decodeEvent(t, "  "+line+"\r\n", Options{})
	assert.Equal(t, e1.ID, e2.ID, "redelivery with other framing white space has the same id")
	sum := sha256.Sum256([]byte(line))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:16]), e1.ID)
	assert.Equal(t, e1.ID, DerivedID([]byte(line+"\n")))
	assert.Regexp(t, `^sha256:[0-9a-f]{32}$`, e1.ID)

	other := decodeEvent(t, strings.Replace(line, "09:00:00Z", "09:00:01Z", 1), Options{})
	assert.NotEqual(t, e1.ID, other.ID, "a different payload has a different id")
	reordered := decodeEvent(t, `{"server":"s","ts":"2026-11-03T09:00:00Z","tool":"get_vm_status","decision":"allowed"}`, Options{})
	assert.NotEqual(t, e1.ID, reordered.ID, "the id hashes the payload bytes")

	withID := decodeEvent(t, `{"id":"mine","ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed"}`, Options{})
	assert.Equal(t, "mine", withID.ID)

	// ingest --server re-labels: the label is part of the derived id, so one
	// line under two names is two events, and under one name one.
	a := decodeEvent(t, line, Options{Server: "pve-a"})
	b := decodeEvent(t, line, Options{Server: "pve-b"})
	again := decodeEvent(t, line+"\n", Options{Server: "pve-a"})
	assert.NotEqual(t, a.ID, b.ID)
	assert.NotEqual(t, e1.ID, a.ID)
	assert.Equal(t, a.ID, again.ID)
	assert.Regexp(t, `^sha256:[0-9a-f]{32}$`, a.ID)
	mineRelabelled := decodeEvent(t, `{"id":"mine","ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed"}`, Options{Server: "x"})
	assert.Equal(t, "mine", mineRelabelled.ID, "an id the gateway gave is kept")
}

func TestDecodeIsConcurrencySafe(t *testing.T) {
	lines := [][]byte{benchNative, benchNativeNoID, benchCloudEvents, benchIntercept, benchDocker}
	want := make([]Result, len(lines))
	for i, l := range lines {
		var err error
		want[i], err = Decode(l, Options{StoreArgs: true, Server: "pve"})
		require.NoError(t, err)
	}
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for n := 0; n < 500; n++ {
				i := n % len(lines)
				got, err := Decode(lines[i], Options{StoreArgs: true, Server: "pve"})
				if !assert.NoError(t, err) || !assert.Equal(t, want[i], got) {
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

func TestDecodeDoesNotRetainInput(t *testing.T) {
	line := []byte(`{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"get_vm_status","decision":"allowed","args":{"a":"b"}}`)
	res, err := Decode(line, Options{StoreArgs: true})
	require.NoError(t, err)
	for i := range line {
		line[i] = 'x'
	}
	assert.Equal(t, "get_vm_status", res.Event.Tool)
	assert.Equal(t, json.RawMessage(`{"a":"b"}`), res.Event.Args)
}

func TestParseTime(t *testing.T) {
	for _, v := range []string{
		"2026-11-03T09:00:00Z", "2026-11-03T09:00:00.1Z", "2026-11-03T09:00:00.123456789Z",
		"2026-11-03T09:00:00.000000001+01:00", "2026-11-03T23:59:59-23:59", "2024-02-29T00:00:00Z",
		"2026-12-31T23:59:59.999999999+00:00", "0001-01-01T00:00:01Z", "9999-12-31T23:59:59Z",
		"2026-04-30T10:00:00-00:00",
	} {
		got, err := parseTime(v)
		require.NoError(t, err, v)
		want, err := time.Parse(time.RFC3339Nano, v)
		require.NoError(t, err, v)
		assert.True(t, want.Equal(got), v)
		assert.Equal(t, time.UTC, got.Location())
	}
	// more than nanosecond precision is truncated, other separators accepted
	got, err := parseTime("2026-11-03t09:00:00.1234567891z")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 11, 3, 9, 0, 0, 123456789, time.UTC), got)
	got, err = parseTime("2026-11-03 09:00:00+02:00")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 11, 3, 7, 0, 0, 0, time.UTC), got)

	for _, v := range []string{
		"", "2026-11-03", "2026-11-03T09:00:00", "2026-11-03T9:00:00Z", "2026-11-03T09:00Z",
		"2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-11-03T24:00:00Z",
		"2026-11-03T09:60:00Z", "2026-11-03T09:00:60Z", "2026-11-03T09:00:00.Z", "2026-11-03T09:00:00+0100",
		"2026-11-03T09:00:00+24:00", "2026-11-03T09:00:00 Z", "2026-11-03T09:00:00Zjunk", "2026/11/03T09:00:00Z",
		"+026-11-03T09:00:00Z", "0000-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00",
		"１２３４-11-03T09:00:00Z",
	} {
		_, err := parseTime(v)
		assert.Error(t, err, v)
	}
}

// Borrow decodes the same event without copying the payload: its strings
// point into the payload itself.
func TestDecodeBorrowAliasesThePayload(t *testing.T) {
	line := []byte(`{"id":"evt-1","ts":"2026-11-03T10:00:00Z","server":"proxmox-mcp","tool":"vm_list","decision":"allowed","session":"s-1"}`)
	copied, err := Decode(line, Options{})
	require.NoError(t, err)
	borrowed, err := Decode(line, Options{Borrow: true})
	require.NoError(t, err)
	assert.Equal(t, copied, borrowed)
	inLine := func(s string) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(&line[0]))
		return p >= lo && p < lo+uintptr(len(line))
	}
	assert.True(t, inLine(borrowed.Event.Tool), "borrowed strings alias the payload")
	assert.False(t, inLine(copied.Event.Tool), "by default the event owns a copy")
}

// arg_keys is read only when no args object gives the keys, as if every
// member were applied in order: the last arg_keys array counts (a later
// null leaves it), an args object replaces it, and a malformed arg_keys is
// refused even beside args.
func TestArgKeysBesideArgs(t *testing.T) {
	base := `"ts":"2026-11-03T09:00:00Z","server":"proxmox-mcp","decision":"allowed","tool":"x"`
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`{` + base + `,"arg_keys":["vmid","node"]}`, []string{"node", "vmid"}},
		{`{` + base + `,"arg_keys":["b"],"arg_keys":["c","a"]}`, []string{"a", "c"}},
		{`{` + base + `,"arg_keys":["b"],"arg_keys":null}`, []string{"b"}},
		{`{` + base + `,"arg_keys":["stale"],"args":{"node":"pve1","vmid":1}}`, []string{"node", "vmid"}},
		{`{` + base + `,"args":{"node":"pve1"},"arg_keys":["stale"]}`, []string{"node"}},
		{`{` + base + `,"arg_keys":["kept"],"args":{"node":"pve1"},"args":null}`, []string{"kept"}},
		{`{` + base + `,"arg_keys":["stale"],"args":{}}`, nil},
	} {
		e := decodeEvent(t, tc.line, Options{})
		assert.Equal(t, tc.want, e.ArgKeys, tc.line)
	}
	for _, line := range []string{
		`{` + base + `,"arg_keys":5,"args":{"node":"pve1"}}`,
		`{` + base + `,"arg_keys":["a",5],"args":{"node":"pve1"}}`,
	} {
		_, err := Decode([]byte(line), Options{})
		require.Error(t, err, line)
		assert.Equal(t, ReasonBadField, ReasonOf(err), line)
	}
}
