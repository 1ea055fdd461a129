package ingest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
)

// otlpFile writes an OTLP/JSON file of lines (each a traces request of
// spans[i] tool calls, ids "e<line>-<k>", or the text given) and returns
// its path and the ids of its calls in file order.
func otlpFile(t *testing.T, lines []any) (string, []string) {
	t.Helper()
	var text strings.Builder
	var ids []string
	base := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for i, l := range lines {
		switch v := l.(type) {
		case string:
			text.WriteString(v)
		case int:
			var evs []audit.Event
			for k := range v {
				evs = append(evs, audit.Event{ID: fmt.Sprintf("e%d-%d", i+1, k), TS: base.Add(time.Duration(i*1000+k) * time.Millisecond),
					Server: "proxmox-mcp", Tool: "get_vm_status", Method: "tools/call", Decision: audit.Allowed, Session: "s"})
			}
			js, err := otlp.MarshalJSON(otlp.TracesRequest(evs, otlp.EncodeOptions{}))
			require.NoError(t, err)
			text.Write(js)
			res, err := otlp.Decode(js, otlp.JSON, otlp.Traces, otlp.Options{})
			require.NoError(t, err)
			for _, e := range res.Events {
				ids = append(ids, e.ID)
			}
		}
		text.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "traces.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(text.String()), 0o600))
	return path, ids
}

func readOTLPFile(t *testing.T, path string, sink Sink, batch int) (Totals, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return ReadOTLP(context.Background(), bufio.NewReader(f), otlp.Options{}, 0, sink, FileOptions{Name: path, BatchLines: batch})
}

// TestReadOTLPKeepsTheOrderOfItsLines: lines decoded side by side are
// stored in the order of the file, in batches of exactly BatchLines calls
// but the last, and a line that is not a request becomes a dead letter
// with its own line number; blank lines are counted and skipped.
func TestReadOTLPKeepsTheOrderOfItsLines(t *testing.T) {
	var lines []any
	for i := range 60 {
		switch i {
		case 6:
			lines = append(lines, `{"resourceSpans":[`) // malformed
		case 12:
			lines = append(lines, `{"other":1}`) // not OTLP
		case 20:
			lines = append(lines, "") // blank
		default:
			lines = append(lines, 1+(i*37)%90) // uneven lines: the small ones finish first
		}
	}
	path, ids := otlpFile(t, lines)
	sink := &memSink{}
	tot, err := readOTLPFile(t, path, sink, 200)
	require.NoError(t, err)
	got := make([]string, len(sink.events))
	for i, e := range sink.events {
		got[i] = e.ID
	}
	assert.Equal(t, ids, got, "the calls in file order")
	require.Len(t, sink.dead, 2)
	assert.Equal(t, int64(7), sink.dead[0].Line)
	assert.Equal(t, audit.ReasonMalformedJSON, sink.dead[0].Reason)
	assert.Equal(t, int64(13), sink.dead[1].Line)
	assert.Equal(t, audit.ReasonUnknownFormat, sink.dead[1].Reason)
	assert.Equal(t, path, sink.dead[1].Source)
	assert.Equal(t, int64(60), tot.Lines)
	assert.Equal(t, len(ids), tot.Ingested)
	assert.Equal(t, (len(ids)+199)/200, sink.appends, "batches of 200 calls, a line's calls split between two")
	assert.LessOrEqual(t, sink.largest, 200+2, "200 calls and the dead letters")
}

// TestReadOTLPStopsAtAStoreError: when a batch cannot be stored, reading
// stops and says so (the lines being decoded are dropped, nothing hangs).
func TestReadOTLPStopsAtAStoreError(t *testing.T) {
	lines := make([]any, 200)
	for i := range lines {
		lines[i] = 20
	}
	path, _ := otlpFile(t, lines)
	sink := &memSink{failN: 1}
	_, err := readOTLPFile(t, path, sink, 50)
	require.ErrorContains(t, err, "store batch from "+path)
	assert.Zero(t, sink.appends)
}

// TestReadOTLPDeadLettersALineOverTheLimit: a line longer than
// OTLPLineLimit becomes a dead letter with its line number, keeping only
// its digest; the lines around it are stored.
func TestReadOTLPDeadLettersALineOverTheLimit(t *testing.T) {
	path, ids := otlpFile(t, []any{3, `{"resourceSpans":[{"x":"` + strings.Repeat("a", OTLPLineLimit) + `"}]}`, 2})
	sink := &memSink{}
	tot, err := readOTLPFile(t, path, sink, 100)
	require.NoError(t, err)
	require.Len(t, sink.events, 5)
	assert.Equal(t, ids[4], sink.events[4].ID)
	require.Len(t, sink.dead, 1)
	d := sink.dead[0]
	assert.Equal(t, int64(2), d.Line)
	assert.Equal(t, audit.ReasonTooLarge, d.Reason)
	assert.Equal(t, FormatOTLP, d.Format)
	assert.Less(t, len(d.Raw), 200, "the digest, not the line")
	assert.Equal(t, int64(3), tot.Lines)
}
