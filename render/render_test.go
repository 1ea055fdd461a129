package render

import (
	"bytes"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func renderAll(t *testing.T, f Format, cols []string, rows [][]any) string {
	t.Helper()
	var buf bytes.Buffer
	w := New(f, &buf)
	require.NoError(t, w.Header(cols))
	for _, r := range rows {
		require.NoError(t, w.Row(r))
	}
	require.NoError(t, w.Close())
	return buf.String()
}

func TestFormats(t *testing.T) {
	ts := time.Date(2026, 11, 3, 14, 5, 9, 0, time.FixedZone("CET", 3600))
	cols := []string{"tool", "calls", "p95_ms", "last", "keys"}
	rows := [][]any{
		{"get_vm_status", int64(1234), 12.5, ts, []any{"node", "vmid"}},
		{"a,b \"quoted\"", int64(7), nil, nil, nil},
	}
	assert.Equal(t, `tool,calls,p95_ms,last,keys
get_vm_status,1234,12.5,2026-11-03T13:05:09Z,"[""node"",""vmid""]"
"a,b ""quoted""",7,,,
`, renderAll(t, CSV, cols, rows))
	assert.Equal(t, `[
  {"tool": "get_vm_status", "calls": 1234, "p95_ms": 12.5, "last": "2026-11-03T13:05:09Z", "keys": ["node","vmid"]},
  {"tool": "a,b \"quoted\"", "calls": 7, "p95_ms": null, "last": null, "keys": null}
]
`, renderAll(t, JSON, cols, rows))
	assert.Equal(t, `tool           calls  p95_ms  last                  keys
---------------------------------------------------------------------
get_vm_status   1234    12.5  2026-11-03T13:05:09Z  ["node","vmid"]
a,b "quoted"       7
`, renderAll(t, Table, cols, rows))
}

func TestEmptyResults(t *testing.T) {
	assert.Equal(t, "a,b\n", renderAll(t, CSV, []string{"a", "b"}, nil))
	assert.Equal(t, "[]\n", renderAll(t, JSON, []string{"a", "b"}, nil))
	assert.Contains(t, renderAll(t, Table, []string{"a", "b"}, nil), "(no rows)")
}

func TestValue(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, ""}, {"x", "x"}, {int64(-3), "-3"}, {uint64(9), "9"}, {float64(1) / 3, "0.3333333333333333"},
		{2.0, "2"}, {true, "true"}, {big.NewInt(12345678901234), "12345678901234"},
		{map[any]any{"k": "v"}, `{"k":"v"}`}, {[]byte("raw"), "raw"},
	} {
		assert.Equal(t, tc.want, Value(tc.in))
	}
}

func TestParseFormat(t *testing.T) {
	f, err := ParseFormat("CSV")
	require.NoError(t, err)
	assert.Equal(t, CSV, f)
	_, err = ParseFormat("xml")
	assert.ErrorContains(t, err, "table, csv, json")
}
