package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"

	"github.com/mcptrail/mcptrail/audit"
)

// ErrFileChanged is the error of a file that changed while ReadFile read
// it where it lies: truncated (log rotation by copytruncate) or rewritten in
// place. The batches stored before it stay stored.
var ErrFileChanged = errors.New("the file was truncated or rewritten while it was read; ingest it again once it is complete (ids already stored are skipped)")

// ReadFile is ReadStream over an open file. A regular file is read from
// its start whatever its offset, and where the sink stages its batches,
// where it lies, mapped into memory: the decoder reads each line in the
// file's pages instead of a copy that read(2) made into a buffer and the
// reader into a slab, and the pages behind the reader are handed back as
// it goes, so the mapping adds nothing to the resident memory that stays.
// What the file gains after the mapping (or a last line without its
// newline) is read as a stream. A regular file that cannot be mapped is
// read as a stream from its start; a pipe, a terminal or a device, from
// where it is (a pipe cannot be read at an offset).
func ReadFile(ctx context.Context, f *os.File, dec *Decoder, sink Sink, opts FileOptions) (Totals, error) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return ReadStream(ctx, f, dec, sink, opts)
	}
	whole := io.NewSectionReader(f, 0, math.MaxInt64)
	_, stages := sink.(StagingSink)
	if !stages {
		return ReadStream(ctx, whole, dec, sink, opts)
	}
	m, err := mapFile(f, st.Size())
	if err != nil || m == nil {
		if err != nil && opts.Log != nil {
			opts.Log.Debug("reading the file as a stream", "file", opts.Name, "why", err)
		}
		return ReadStream(ctx, whole, dec, sink, opts)
	}
	defer m.close()
	dec.mapped = true
	defer func() { dec.mapped = false }()
	// The stages are waited for before the mapping goes; the reader never
	// blocks for long (the file's end is read with pread, which returns).
	return readStream(ctx, dec, sink, opts, true, func(ctx context.Context, out chan<- readChunk, size, limit int) {
		defer close(out)
		readMapped(ctx, m, f, out, size, limit, opts.Name)
	})
}

// readMapped sends the mapped file's lines in chunks of size, as
// readChunks does, then whatever follows the mapping's last newline as a
// stream.
func readMapped(ctx context.Context, m *mapping, f *os.File, out chan<- readChunk, size, limit int, name string) {
	var lineNo int64
	var c readChunk
	var faulted error
	mapped := 0 // the bytes up to the mapping's last newline
	ok := func() (ok bool) {
		// A fault reading the mapping (a page past the end of a file
		// truncated meanwhile: SIGBUS) panics instead of ending the
		// process, and catchFault makes it an error.
		debug.SetPanicOnFault(true)
		defer catchFault(&faulted)
		mapped = bytes.LastIndexByte(m.data, '\n') + 1
		data := m.data[:mapped]
		released, prev := 0, 0 // the pages handed back, the previous chunk's start
		for off := 0; off < len(data); {
			c = readChunk{msgs: make([]Message, 0, size)}
			start := off
			for len(c.msgs) < size && off < len(data) {
				end := off + bytes.IndexByte(data[off:], '\n')
				n := end + 1 - off
				line := bytes.TrimSuffix(data[off:end:end], []byte("\r"))
				off = end + 1
				lineNo++
				c.bytes += n
				if !keepLine(line, n, limit) {
					continue
				}
				line = audit.TrimLeadingSpace(line) // not counted against the limit (the decoder measures the payload without it)
				var whole *Digest
				if len(line) > limit {
					whole = &Digest{Size: len(line), Sum: sha256.Sum256(line)}
					line = line[: limit+1 : limit+1]
				}
				c.msgs = append(c.msgs, Message{Data: line, Source: name, Line: lineNo, Whole: whole})
			}
			if !sendChunk(ctx, out, c) {
				return false
			}
			// Once a chunk is taken, the one before it has been decoded
			// and staged (copied): its pages can go. Were one read
			// again, it would be read back from the page cache.
			released = m.release(released, prev)
			prev = start
		}
		return true
	}()
	if faulted != nil {
		c.msgs, c.err = nil, fmt.Errorf("read %s after line %d: %w", name, lineNo, faulted)
		sendChunk(ctx, out, c)
		return
	}
	if !ok {
		return
	}
	tail := io.NewSectionReader(f, int64(mapped), math.MaxInt64)
	readChunks(ctx, bufio.NewReaderSize(tail, 1<<20), out, size, limit, name, lineNo)
}

// catchFault turns a panic of a memory fault (the mapped file truncated
// under a goroutine that set debug.SetPanicOnFault) into *err; other
// panics go on.
func catchFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if _, ok := r.(interface{ Addr() uintptr }); ok {
		*err = ErrFileChanged
		return
	}
	panic(r)
}
