package ingest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lines of a mapped file are the lines a stream of it gives: the same
// bytes kept (a CR before the newline dropped, a line over the limit cut
// to limit+1 bytes with the digest of all of it), the same line numbers,
// blank lines skipped alike, every byte counted, a last line without its
// newline read too.
func TestMappedLinesAreTheStreamedLines(t *testing.T) {
	const limit = 40
	rng := rand.New(rand.NewPCG(3, 9))
	var random strings.Builder
	for i := range 3000 {
		n := rng.IntN(3 * limit)
		b := make([]byte, n)
		for j := range b {
			b[j] = " a{}\r\"x"[rng.IntN(7)]
		}
		random.Write(b)
		if i%5 == 0 {
			random.WriteString("\r")
		}
		random.WriteString("\n")
	}
	inputs := map[string]string{
		"random":                 random.String(),
		"random, last line open": random.String() + `{"a":1}`,
		"no newline at all":      `{"a":1}`,
		"CRLF":                   "{}\r\n{\"b\":2}\r\n",
		"CR inside a line":       "{\r}\n",
		"blank lines":            "\n\n   \n\t\n{}\n\n",
		"a blank line too long":  strings.Repeat(" ", limit+3) + "\n{}\n",
		"a line just at limit":   strings.Repeat("y", limit) + "\n" + strings.Repeat("z", limit+1) + "\r\n",
		"a long last line":       "{}\n" + strings.Repeat("w", 5*limit),
		"leading white space":    strings.Repeat(" \t", limit) + strings.Repeat("v", limit-2) + "\n" + strings.Repeat(" ", 3) + strings.Repeat("u", limit+1) + "\n",
		"other white space":      "\u00a0\n\f\n",
	}
	for name, input := range inputs {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(input), 0o600))
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()

			streamed, streamedBytes := collectLines(t, func(out chan<- readChunk) {
				defer close(out)
				readChunks(context.Background(), bufio.NewReaderSize(f, 16), out, 64, limit, "events.jsonl", 0)
			})
			m, err := mapWhole(f)
			require.NoError(t, err)
			require.NotNil(t, m, "a regular file is mapped")
			defer m.close()
			mapped, mappedBytes := collectLines(t, func(out chan<- readChunk) {
				defer close(out)
				readMapped(context.Background(), m, f, out, 64, limit, "events.jsonl")
			})
			assert.Equal(t, len(input), streamedBytes)
			assert.Equal(t, len(input), mappedBytes, "every byte is counted")
			assert.Equal(t, streamed, mapped)
			for _, l := range streamed {
				assert.Equal(t, strings.TrimLeft(l.Data, " \t"), l.Data, "line %d: leading white space is not kept (nor counted)", l.Line)
			}
		})
	}
}

// Leading white space does not count against the limit (the decoder
// measures the payload without it) and is dropped; white space that is
// no JSON makes no blank line.
func TestLinesWithoutLeadingWhiteSpace(t *testing.T) {
	const limit = 40
	event := strings.Repeat("v", limit-2)
	input := strings.Repeat(" \t", limit) + event + "\n\u00a0\n"
	lines, _ := collectLines(t, func(out chan<- readChunk) {
		defer close(out)
		readChunks(context.Background(), bufio.NewReaderSize(strings.NewReader(input), 16), out, 64, limit, "events.jsonl", 0)
	})
	require.Len(t, lines, 2)
	assert.Equal(t, readLineOut{Data: event, Line: 1}, lines[0], "kept whole, no digest")
	assert.Equal(t, "\u00a0", lines[1].Data, "a no-break space is a line to reject")
}

// An empty file is not mapped: it is read as a stream (which sees what is
// written to it meanwhile).
func TestEmptyFileIsNotMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.jsonl")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m, err := mapWhole(f)
	require.NoError(t, err)
	assert.Nil(t, m)
}

type readLineOut struct {
	Data  string
	Line  int64
	Whole *Digest
}

// collectLines runs read and returns the lines it sent (each chunk at
// most 64 of them) and the bytes they took.
func collectLines(t *testing.T, read func(out chan<- readChunk)) (lines []readLineOut, bytes int) {
	t.Helper()
	out := make(chan readChunk)
	go read(out)
	for c := range out {
		require.NoError(t, c.err)
		assert.LessOrEqual(t, len(c.msgs), 64)
		bytes += c.bytes
		for _, m := range c.msgs {
			assert.Equal(t, "events.jsonl", m.Source)
			lines = append(lines, readLineOut{Data: string(m.Data), Line: m.Line, Whole: m.Whole})
		}
	}
	return lines, bytes
}

// The reader of a mapped file truncated under it sends ErrFileChanged
// rather than ending the process on the fault.
func TestMappedReaderOfATruncatedFile(t *testing.T) {
	f, m, truncate := mappedFile(t, strings.Repeat(`{"a":1}`+"\n", 100_000))
	truncate()

	out := make(chan readChunk)
	go func() {
		defer close(out)
		readMapped(context.Background(), m, f, out, 64, 100, "events.jsonl")
	}()
	var last error
	for c := range out {
		last = c.err
	}
	require.ErrorIs(t, last, ErrFileChanged)
	assert.Contains(t, last.Error(), "read events.jsonl after line 0")
}

// Decoding lines of a mapped file truncated under the decoder's workers
// returns ErrFileChanged rather than ending the process on the fault.
func TestDecodingATruncatedMappedFile(t *testing.T) {
	event := `{"id":"e1","ts":"2026-11-20T10:00:00Z","server":"s","tool":"t","decision":"allowed"}`
	_, m, truncate := mappedFile(t, strings.Repeat(event+"\n", 20_000))
	var msgs []Message
	for off := 0; off < len(m.data); off += len(event) + 1 {
		msgs = append(msgs, Message{Data: m.data[off : off+len(event)], Source: "events.jsonl", Line: int64(len(msgs) + 1)})
	}
	truncate()

	dec := &Decoder{Workers: 2, mapped: true}
	var out Decoded
	err := dec.decodeAppend(context.Background(), msgs, &out, true)
	require.ErrorIs(t, err, ErrFileChanged)
	assert.Contains(t, err.Error(), "decode lines 1-20000 of events.jsonl")
	assert.Equal(t, 1, strings.Count(err.Error(), "ingest it again"), "each worker's fault said it again: %v", err)
}

// mappedFile writes content to a file and maps it; truncate empties the
// file under the mapping.
func mappedFile(t *testing.T, content string) (f *os.File, m *mapping, truncate func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err = mapWhole(f)
	require.NoError(t, err)
	require.NotNil(t, m)
	t.Cleanup(m.close)
	return f, m, func() { require.NoError(t, os.Truncate(path, 0)) }
}

// The reading stage alone over the same file, as a stream (read(2) into a
// buffer, each line copied into a slab) and mapped (each line where it
// lies): the stage's cost per line, the decoder and the sink left out.
func BenchmarkReadLinesStreamed(b *testing.B) { benchmarkReadLines(b, false) }
func BenchmarkReadLinesMapped(b *testing.B)   { benchmarkReadLines(b, true) }

func benchmarkReadLines(b *testing.B, mapped bool) {
	var content strings.Builder
	for i := range 200_000 {
		fmt.Fprintf(&content, `{"id":"e%d","ts":"2026-11-20T10:00:00Z","server":"proxmox-mcp","tool":"get_vm_status","decision":"allowed","agent":"ops-bot","session":"s-%d","args":{"vmid":%d}}`+"\n", i, i/50, i%300)
	}
	path := filepath.Join(b.TempDir(), "events.jsonl")
	require.NoError(b, os.WriteFile(path, []byte(content.String()), 0o600))
	f, err := os.Open(path)
	require.NoError(b, err)
	defer f.Close()
	b.SetBytes(int64(content.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out := make(chan readChunk)
		go func() {
			defer close(out)
			if !mapped {
				readChunks(context.Background(), bufio.NewReaderSize(io.NewSectionReader(f, 0, math.MaxInt64), 1<<20), out, fileChunkLines, 64<<10, "events.jsonl", 0)
				return
			}
			m, err := mapWhole(f)
			if err != nil {
				panic(err)
			}
			defer m.close()
			readMapped(context.Background(), m, f, out, fileChunkLines, 64<<10, "events.jsonl")
		}()
		lines := 0
		for c := range out {
			lines += len(c.msgs)
		}
		if lines != 200_000 {
			b.Fatalf("%d lines", lines)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/200_000, "ns/line")
}

// mapWhole maps f at its size now, as ReadFile does.
func mapWhole(f *os.File) (*mapping, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return mapFile(f, st.Size())
}
