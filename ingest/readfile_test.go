package ingest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// eventsFile writes n events (each batch of 100 with a repeat and a dead
// letter, and a blank line) to a file, the last line without its newline.
func eventsFile(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		b.WriteString(line(i) + "\n")
		if i%100 == 0 {
			b.WriteString(line(i) + "\r\n\n")
			b.WriteString(`{"ts":"nope"}` + "\n")
		}
	}
	b.WriteString(line(n))
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// ReadFile stores what ReadStream stores from the same file, whatever the
// file's offset when it is handed over.
func TestReadFileStoresWhatReadStreamStores(t *testing.T) {
	path := eventsFile(t, 5000)
	data, err := os.ReadFile(path)
	require.NoError(t, err)

	streamed := openStore(t)
	dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	want, err := ingest.ReadStream(context.Background(), strings.NewReader(string(data)), dec, streamed,
		ingest.FileOptions{Name: "events.jsonl", BatchLines: 700})
	require.NoError(t, err)

	mapped := openStore(t)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Seek(1234, 0) // a reader that sniffed the format moved it
	require.NoError(t, err)
	dec = &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	got, err := ingest.ReadFile(context.Background(), f, dec, mapped, ingest.FileOptions{Name: "events.jsonl", BatchLines: 700})
	require.NoError(t, err)

	assert.Equal(t, want, got)
	assert.Equal(t, 5001, got.Ingested)
	assert.Equal(t, 50, got.Rejected)
	for _, q := range []string{
		`SELECT string_agg(id || ts || tool || decision, ',' ORDER BY id) FROM calls`,
		`SELECT string_agg(source || line || reason || raw::VARCHAR, ',' ORDER BY line) FROM dead_letters`,
	} {
		var a, b string
		require.NoError(t, streamed.DB().QueryRow(q).Scan(&a))
		require.NoError(t, mapped.DB().QueryRow(q).Scan(&b))
		assert.Equal(t, a, b, q)
	}
}

// onAppend is a staging store that runs a function once, after the first
// batch it stores.
type onAppend struct {
	stagingSizes
	then func()
}

func (s *onAppend) Append(ctx context.Context, b ingest.Batch) (ingest.Result, error) {
	res, err := s.stagingSizes.Append(ctx, b)
	if s.then != nil {
		s.then()
		s.then = nil
	}
	return res, err
}

// A file truncated while it is read where it lies (log rotation by
// copytruncate) ends the ingest with ErrFileChanged instead of ending the
// process on the fault of reading a page that is gone; the batches stored
// before stay stored.
func TestReadFileTruncatedMeanwhile(t *testing.T) {
	path := eventsFile(t, 20000)
	store := &onAppend{stagingSizes: stagingSizes{&sizes{store: openStore(t)}}}
	store.then = func() { require.NoError(t, os.Truncate(path, 0)) }
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	tot, err := ingest.ReadFile(context.Background(), f, dec, store, ingest.FileOptions{Name: "events.jsonl", BatchLines: 500})
	require.ErrorIs(t, err, ingest.ErrFileChanged)
	assert.Contains(t, err.Error(), "events.jsonl")
	assert.GreaterOrEqual(t, tot.Ingested, 500-5, "the first batch is stored")
	var n int
	require.NoError(t, store.store.DB().QueryRow(`SELECT count(*) FROM calls`).Scan(&n))
	assert.Equal(t, tot.Ingested, n)
}

// What is appended to a file while it is read, past the part mapped, is
// read too, as a stream would read it; so is a last line that the
// appending completes.
func TestReadFileReadsWhatIsAppendedMeanwhile(t *testing.T) {
	path := eventsFile(t, 3000)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, st.Size()-1)) // line(3000) without its "}" and newline yet
	store := &onAppend{stagingSizes: stagingSizes{&sizes{store: openStore(t)}}}
	store.then = func() {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteString(`,"latency_ms":7}` + "\n" + line(3001) + "\n")
		require.NoError(t, err)
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	tot, err := ingest.ReadFile(context.Background(), f, dec, store, ingest.FileOptions{Name: "events.jsonl", BatchLines: 500})
	require.NoError(t, err)
	assert.Equal(t, 3002, tot.Ingested)
	assert.Equal(t, 30, tot.Rejected, "the file's own dead letters alone")
	var latency float64
	require.NoError(t, store.store.DB().QueryRow(`SELECT latency_ms FROM calls WHERE id = 'e3000'`).Scan(&latency))
	assert.Equal(t, 7.0, latency, "the last line as completed")
}

// A pipe is no file to map or to read at an offset: ReadFile reads it as
// the stream it is.
func TestReadFileOfAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	go func() {
		defer w.Close()
		for i := range 3000 {
			_, _ = w.WriteString(line(i) + "\n")
		}
	}()
	store := openStore(t)
	dec := &ingest.Decoder{Opts: audit.Options{}, Workers: 2}
	tot, err := ingest.ReadFile(context.Background(), r, dec, store, ingest.FileOptions{Name: "pipe", BatchLines: 500})
	require.NoError(t, err)
	assert.Equal(t, 3000, tot.Ingested)
}

// An interrupted stream returns even while its reader waits on a pipe that
// sends nothing more: the reader is left to end with the pipe.
func TestReadStreamReturnsWhileItsPipeIsSilent(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	_, err = w.WriteString(line(1) + "\n")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ingest.ReadStream(ctx, r, &ingest.Decoder{}, openStore(t), ingest.FileOptions{Name: "-"})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("ReadStream did not return after its context ended")
	}
}
