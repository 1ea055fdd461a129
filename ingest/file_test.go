package ingest_test

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

func openStore(t *testing.T) *analytics.Store {
	t.Helper()
	s, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "i.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func line(i int) string {
	return fmt.Sprintf(`{"id":"e%d","ts":"2026-11-20T10:%02d:%02dZ","server":"proxmox-mcp","tool":"get_vm_status","decision":"allowed"}`, i, (i/60)%60, i%60)
}

func TestReadStreamBatchesAndDeduplicates(t *testing.T) {
	store := openStore(t)
	var b strings.Builder
	for i := 0; i < 1000; i++ {
		b.WriteString(line(i) + "\n")
	}
	b.WriteString("\n   \n")              // blank lines are skipped, not rejected
	b.WriteString(line(5) + "\r\n")       // a duplicate with a CRLF ending
	b.WriteString(`{"ts":"nope"}` + "\n") // rejected
	b.WriteString(line(1000))             // last line without a newline

	dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	tot, err := ingest.ReadStream(context.Background(), strings.NewReader(b.String()), dec, store,
		ingest.FileOptions{Name: "events.jsonl", BatchLines: 64})
	require.NoError(t, err)
	assert.Equal(t, 1001, tot.Ingested)
	assert.Equal(t, 1, tot.Duplicates)
	assert.Equal(t, 1, tot.Rejected)

	var src string
	var ln int
	require.NoError(t, store.DB().QueryRow(`SELECT source, line FROM dead_letters`).Scan(&src, &ln))
	assert.Equal(t, "events.jsonl", src)
	assert.Equal(t, 1004, ln, "line numbers count blank lines too")
}

func TestReadStreamOverLongLine(t *testing.T) {
	store := openStore(t)
	long := `{"id":"big","ts":"2026-11-20T10:00:00Z","server":"s","tool":"t","decision":"allowed","reason":"` +
		strings.Repeat("x", 200_000) + `"}`
	input := line(1) + "\n" + long + "\n" + line(2) + "\n"
	dec := &ingest.Decoder{Opts: audit.Options{MaxEventBytes: 4096}, Workers: 1}
	tot, err := ingest.ReadStream(context.Background(), strings.NewReader(input), dec, store, ingest.FileOptions{Name: "x"})
	require.NoError(t, err)
	assert.Equal(t, 2, tot.Ingested)
	assert.Equal(t, 1, tot.Rejected)
	var reason string
	var size int
	require.NoError(t, store.DB().QueryRow(`SELECT reason, octet_length(raw) FROM dead_letters`).Scan(&reason, &size))
	assert.Equal(t, audit.ReasonTooLarge, reason)
	assert.Equal(t, 4096, size, "raw bytes are truncated to the limit")
}

func TestReadStreamEmpty(t *testing.T) {
	store := openStore(t)
	tot, err := ingest.ReadStream(context.Background(), strings.NewReader(""), &ingest.Decoder{}, store, ingest.FileOptions{Name: "empty"})
	require.NoError(t, err)
	assert.Zero(t, tot.Lines)
	assert.Equal(t, ingest.Result{}, tot.Result)
}

// A reader error stops the stream with the file and line in the message;
// what was stored before stays stored.
func TestReadStreamReaderError(t *testing.T) {
	store := openStore(t)
	r := bufio.NewReader(&failingReader{data: line(1) + "\n" + line(2) + "\n"})
	_, err := ingest.ReadStream(context.Background(), r, &ingest.Decoder{}, store, ingest.FileOptions{Name: "f.jsonl", BatchLines: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read f.jsonl")
	var n int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FROM calls`).Scan(&n))
	assert.Equal(t, 2, n)
}

type failingReader struct {
	data string
	done bool
}

func (f *failingReader) Read(p []byte) (int, error) {
	if !f.done {
		f.done = true
		return copy(p, f.data), nil
	}
	return 0, fmt.Errorf("disk on fire")
}

func TestDecoderKeepsOrderAcrossWorkers(t *testing.T) {
	var msgs []ingest.Message
	for i := 0; i < 101; i++ {
		msgs = append(msgs, ingest.Message{Data: []byte(line(i)), Line: int64(i + 1)})
	}
	msgs[50].Data = []byte("{bad")
	dec := &ingest.Decoder{Workers: 4}
	out, err := dec.Decode(context.Background(), msgs)
	require.NoError(t, err)
	require.Len(t, out.Events, 100)
	require.Len(t, out.Dead, 1)
	assert.Equal(t, int64(51), out.Dead[0].Line)
	assert.Equal(t, audit.ReasonMalformedJSON, out.Dead[0].Reason)
	for i, e := range out.Events {
		want := i
		if i >= 50 {
			want = i + 1
		}
		assert.Equal(t, fmt.Sprintf("e%d", want), e.ID)
	}
}

// Intercept startup lines name the server of later tool calls even when the
// two land in different batches.
func TestDecoderInterceptAcrossBatches(t *testing.T) {
	dec := &ingest.Decoder{Workers: 2}
	start := ingest.Message{Data: []byte(`{"ts":"2026-11-20T10:00:00Z","type":"startup","instance":"9f3a01bc","server":"npx"}`)}
	call := ingest.Message{Data: []byte(`{"ts":"2026-11-20T10:00:01Z","type":"tool_call","instance":"9f3a01bc","tool":"list_vms","result":"allowed"}`)}
	orphan := ingest.Message{Data: []byte(`{"ts":"2026-11-20T10:00:01Z","type":"tool_call","instance":"00000000","tool":"list_vms","result":"allowed"}`)}
	out, err := dec.Decode(context.Background(), []ingest.Message{start})
	require.NoError(t, err)
	assert.Equal(t, 1, out.Skipped)
	out, err = dec.Decode(context.Background(), []ingest.Message{call, orphan})
	require.NoError(t, err)
	require.Len(t, out.Events, 1)
	assert.Equal(t, "npx", out.Events[0].Server)
	require.Len(t, out.Dead, 1)
	assert.Equal(t, audit.ReasonMissingServer, out.Dead[0].Reason)
}
