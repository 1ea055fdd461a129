package ingest_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
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
	assert.Equal(t, len(audit.PayloadDigest([32]byte{}, len(long))), size, "without store_args only a digest is kept")
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

// TestDeadLettersKeepNoArguments: without store_args, a rejected line of any
// format keeps its keys but no argument value; a line that is not JSON, or is
// cut short for its size, keeps only its digest. With store_args the raw
// bytes are kept as they came.
func TestDeadLettersKeepNoArguments(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	b64 := base64.StdEncoding.EncodeToString([]byte(`{"ts":"2026-11-20T10:00:00Z","server":"s","tool":"t","decision":"maybe","args":{"password":"` + secret + `"}}`))
	lines := []string{
		`{"ts":"2026-11-20T10:00:00Z","server":"s","tool":"login","decision":"maybe","args":{"user":"bob","password":"` + secret + `","opts":{"token":["` + secret + `"]}}}`,
		`{"specversion":"1.0","id":"c1","time":"2026-11-20T10:00:00Z","data":{"server":"s","tool":"t","decision":"maybe","args":{"password":"` + secret + `"}}}`,
		`{"specversion":"1.0","id":"c2","data":"{\"server\":\"s\",\"tool\":\"t\",\"decision\":\"maybe\",\"args\":{\"password\":\"` + secret + `\"}}"}`,
		`{"specversion":"1.0","id":"c3","data_base64":"` + b64 + `"}`,
		`{"ts":"2026-11-20T10:00:00Z","type":"tool_call","instance":"i1","tool":"t","result":"maybe","arguments":{"password":"` + secret + `"}}`,
		`{"timestamp":"2026-11-20T10:00:00Z","server_name":"s","tool_name":"t","result":"maybe","arguments":{"password":"` + secret + `"}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","arguments":{"password":"` + secret + `"}}}`,
		`{"ts":"2026-11-20T10:00:00Z","args":{"password":"` + secret + `"}`, // malformed: only a digest
		`{"ts":"2026-11-20T10:00:00Z","server":"s","tool":"t","decision":"allowed","args":{"password":"` + secret + `","pad":"` + strings.Repeat("x", 5000) + `"}}`,
	}
	ingestLines := func(t *testing.T, storeArgs bool) []string {
		store := openStore(t)
		dec := &ingest.Decoder{Opts: audit.Options{Server: "s", MaxEventBytes: 4096, StoreArgs: storeArgs}, Workers: 2}
		tot, err := ingest.ReadStream(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), dec, store, ingest.FileOptions{Name: "x"})
		require.NoError(t, err)
		require.Equal(t, len(lines), tot.Rejected)
		rows, err := store.DB().Query(`SELECT raw FROM dead_letters ORDER BY line`)
		require.NoError(t, err)
		defer rows.Close()
		var raws []string
		for rows.Next() {
			var raw []byte
			require.NoError(t, rows.Scan(&raw))
			raws = append(raws, string(raw))
		}
		require.NoError(t, rows.Err())
		require.Len(t, raws, len(lines))
		return raws
	}

	raws := ingestLines(t, false)
	for i, raw := range raws[:7] {
		assert.NotContains(t, raw, secret, "line %d", i+1)
		if i != 3 { // data_base64 is checked below
			assert.Contains(t, raw, audit.Redacted, "line %d", i+1)
		}
		assert.True(t, json.Valid([]byte(raw)), "line %d: %s", i+1, raw)
	}
	assert.Equal(t, `{"ts":"2026-11-20T10:00:00Z","server":"s","tool":"login","decision":"maybe","args":{"user":"[redacted]","password":"[redacted]","opts":{"token":["[redacted]"]}}}`, raws[0])
	assert.Equal(t, strings.Replace(lines[1], secret, audit.Redacted, 1), raws[1], "CloudEvents data keeps its keys")
	var ce struct {
		Data []byte `json:"data_base64"`
	}
	require.NoError(t, json.Unmarshal([]byte(raws[3]), &ce))
	assert.Equal(t, `{"ts":"2026-11-20T10:00:00Z","server":"s","tool":"t","decision":"maybe","args":{"password":"[redacted]"}}`, string(ce.Data), "CloudEvents data_base64")
	assert.Equal(t, strings.Replace(lines[4], secret, audit.Redacted, 1), raws[4], "Intercept")
	assert.Equal(t, strings.Replace(lines[5], secret, audit.Redacted, 1), raws[5], "docker/mcp-gateway")
	assert.Equal(t, string(audit.PayloadDigest(sha256.Sum256([]byte(lines[7])), len(lines[7]))), raws[7], "not JSON: only the digest")
	assert.Equal(t, string(audit.PayloadDigest(sha256.Sum256([]byte(lines[8])), len(lines[8]))), raws[8], "cut short: the digest of the whole line")

	raws = ingestLines(t, true)
	assert.Equal(t, lines[:8], raws[:8], "store_args keeps the raw bytes")
	assert.True(t, lines[8][:4096] == raws[8], "truncated to the limit")
}

// sizes records the events of each batch a store is handed, staged or not.
type sizes struct {
	store  *analytics.Store
	staged []int
	plain  []int
}

func (s *sizes) Append(ctx context.Context, b ingest.Batch) (ingest.Result, error) {
	if b.Staged != nil {
		s.staged = append(s.staged, b.Staged.Len())
	} else {
		s.plain = append(s.plain, len(b.Events))
	}
	return s.store.Append(ctx, b)
}

func (s *sizes) Checkpoint(ctx context.Context, c string) (uint64, error) { return s.store.Checkpoint(ctx, c) }

// stagingSizes is sizes as a StagingSink.
type stagingSizes struct{ *sizes }

func (s stagingSizes) NewStaging(n int) ingest.Staging { return s.store.NewStaging(n) }

// A file is decoded in chunks and staged as it goes, yet every batch but
// the last holds exactly BatchLines events (one DuckDB row group): a chunk
// that would overfill a batch is split between two, and repeated ids leave
// room that the next events fill. A sink that does not stage gets the same
// batches as events.
func TestReadStreamFillsWholeBatches(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		b.WriteString(line(i) + "\n")
		if i%1000 == 0 {
			b.WriteString(line(i) + "\n")         // a repeat within the batch
			b.WriteString(`{"ts":"nope"}` + "\n") // a dead letter
		}
	}
	for _, staging := range []bool{true, false} {
		rec := &sizes{store: openStore(t)}
		var sink ingest.Sink = rec
		if staging {
			sink = stagingSizes{rec}
		}
		dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
		tot, err := ingest.ReadStream(context.Background(), strings.NewReader(b.String()), dec, sink,
			ingest.FileOptions{Name: "events.jsonl", BatchLines: 3000})
		require.NoError(t, err)
		assert.Equal(t, 20000, tot.Ingested)
		assert.Equal(t, 20, tot.Duplicates)
		assert.Equal(t, 20, tot.Rejected)
		assert.Equal(t, int64(20040), tot.Lines)
		var n int
		require.NoError(t, rec.store.DB().QueryRow(`SELECT count(DISTINCT id) FROM calls`).Scan(&n))
		assert.Equal(t, 20000, n)
		if staging {
			assert.Equal(t, []int{3000, 3000, 3000, 3000, 3000, 3000, 2000}, rec.staged, "staged rows, repeats left out")
			assert.Empty(t, rec.plain)
		} else {
			// Unstaged, a batch counts its repeats too.
			assert.Equal(t, []int{3000, 3000, 3000, 3000, 3000, 3000, 2020}, rec.plain)
		}
	}
}
