package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// FileBatchLines is how many lines a file source hands to the decoder and the
// Sink at once: one DuckDB row group (122,880 rows). A transaction that
// appends whole row groups writes them straight to the database file instead
// of the write-ahead log (measured here: batches of 131,072 append twice as
// fast as batches of 32,768), and a batch of exactly one row group leaves no
// remainder behind: 131,072-line batches left a small row group each, which
// checkpoints merged and rewrote (1M lines: 8.4 s and 1.3 GB RSS, against
// 7.1 s and 1.0 GB).
const FileBatchLines = 122880

// Progress is told how many input bytes have been consumed.
type Progress interface {
	Add(n int) error
}

// FileOptions configure ReadStream.
type FileOptions struct {
	Name       string // shown in dead letters: the path, or "-" for stdin
	BatchLines int    // FileBatchLines when 0
	Progress   Progress
	Log        *slog.Logger
}

// Totals counts the outcome of a stream.
type Totals struct {
	Result
	Skipped int
	Lines   int64
}

// fileChunkLines is how many lines the reader hands the decoder at once: a
// batch of FileBatchLines is assembled from chunks, each staged as soon as
// it is decoded, so that only a chunk's lines and events are alive at a
// time rather than whole batches of each (1M lines held 690 MB of Go heap
// with 122,880-line hand-offs).
const fileChunkLines = 8192

// ReadStream ingests one JSONL stream: it reads lines in constant memory,
// decodes them in chunks in parallel while the previous batch is being
// stored, stages each chunk's events in the sink's own form when it is a
// StagingSink, and appends every batch of BatchLines events through the
// sink. Lines over the event size limit are not buffered whole: their first
// bytes go to a dead letter.
func ReadStream(ctx context.Context, r io.Reader, dec *Decoder, sink Sink, opts FileOptions) (Totals, error) {
	// Its stages are not waited for: a reader blocked on a pipe or a
	// terminal that sends nothing would hold the return (of an error, of
	// an interrupt) for as long.
	return readStream(ctx, dec, sink, opts, false, func(ctx context.Context, out chan<- readChunk, size, limit int) {
		defer close(out)
		readChunks(ctx, bufio.NewReaderSize(r, 1<<20), out, size, limit, opts.Name, 0)
	})
}

// readStream is ReadStream with the lines read by read, which sends them in
// chunks of size lines, each line cut at limit, and closes out. With wait,
// it returns once the goroutines it started have ended, so that nothing
// reads the lines after it returns (a mapped file is unmapped then).
func readStream(ctx context.Context, dec *Decoder, sink Sink, opts FileOptions, wait bool, read func(ctx context.Context, out chan<- readChunk, size, limit int)) (Totals, error) {
	if opts.BatchLines <= 0 {
		opts.BatchLines = FileBatchLines
	}
	limit := dec.Opts.MaxEventBytes
	if limit <= 0 {
		limit = 64 << 10
	}
	var stages sync.WaitGroup
	if wait {
		defer stages.Wait()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Stage 1 reads chunks of lines; stage 2 decodes and stages them into
	// batches; the caller's goroutine appends. Unbuffered channels still
	// overlap the three stages while keeping at most two chunks of lines and
	// two batches alive.
	lines := make(chan readChunk)
	stages.Go(func() { read(ctx, lines, min(opts.BatchLines, fileChunkLines), limit) })
	batches := make(chan fileBatch)
	stages.Go(func() { assembleBatches(ctx, lines, batches, dec, sink, opts.BatchLines) })

	var tot Totals
	// What bounds the stream (MCPTRAIL_DEBUG): the sink's time storing, and
	// its time waiting for batches to be read, decoded and staged.
	started := time.Now()
	var storing, first time.Duration
	if opts.Log != nil {
		defer func() {
			opts.Log.Debug("file ingest", "file", opts.Name, "first_batch_after", first.Round(time.Millisecond),
				"storing", storing.Round(time.Millisecond), "waiting_for_batches", (time.Since(started) - storing).Round(time.Millisecond))
		}()
	}
	for {
		// An interrupt is heard even while the stages wait on a reader
		// that gets nothing (a silent pipe).
		var b fileBatch
		var more bool
		select {
		case b, more = <-batches:
		case <-ctx.Done():
			return tot, ctx.Err()
		}
		if !more {
			return tot, ctx.Err()
		}
		if b.events() > 0 || len(b.batch.DeadLetters) > 0 {
			at := time.Now()
			if first == 0 {
				first = at.Sub(started)
			}
			res, err := sink.Append(ctx, b.batch)
			storing += time.Since(at)
			b.release()
			if err != nil {
				return tot, fmt.Errorf("store batch from %s: %w", opts.Name, err)
			}
			tot.Add(res)
		}
		b.release()
		tot.Skipped += b.skipped
		tot.Lines += int64(b.lines)
		if opts.Progress != nil {
			_ = opts.Progress.Add(b.bytes)
		}
		if b.err != nil {
			return tot, b.err
		}
	}
}

// readChunk is a chunk of lines and the bytes they took.
type readChunk struct {
	msgs  []Message
	bytes int
	err   error
}

// where names the chunk's lines in an error.
func (c readChunk) where() string {
	if len(c.msgs) == 0 {
		return "lines"
	}
	first, last := c.msgs[0], c.msgs[len(c.msgs)-1]
	return fmt.Sprintf("lines %d-%d of %s", first.Line, last.Line, first.Source)
}

// readChunks sends the stream's lines in chunks of size, the last one with
// the read error, if any; lineNo is the number of the line before the
// stream's first.
func readChunks(ctx context.Context, br *bufio.Reader, out chan<- readChunk, size, limit int, name string, lineNo int64) {
	lines := slab{size: slabBytes}
	for {
		c := readChunk{msgs: make([]Message, 0, size)}
		for len(c.msgs) < size {
			data, n, whole, err := lines.readLine(br, limit)
			if n > 0 || len(data) > 0 {
				lineNo++
				c.bytes += n
				if keepLine(data, n, limit) {
					c.msgs = append(c.msgs, Message{Data: data, Source: name, Line: lineNo, Whole: whole})
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.err = fmt.Errorf("read %s at line %d: %w", name, lineNo+1, err)
				}
				sendChunk(ctx, out, c)
				return
			}
		}
		if !sendChunk(ctx, out, c) {
			return
		}
	}
}

// keepLine says whether a line read (n bytes of the stream, its line
// ending included) goes to the decoder: blank lines do not, unless too
// long, which the decoder rejects.
func keepLine(line []byte, n, limit int) bool {
	return !blank(line) || n > limit
}

// blank says whether b is JSON white space only (space, tab, CR, LF), as
// the decoder skips it: other white space (a no-break space, a form feed)
// is no JSON and is dead-lettered, not dropped.
func blank(b []byte) bool {
	return len(audit.TrimLeadingSpace(b)) == 0
}

// sendChunk hands c on unless ctx ends first.
func sendChunk(ctx context.Context, out chan<- readChunk, c readChunk) bool {
	select {
	case out <- c:
		return true
	case <-ctx.Done():
		return false
	}
}

// fileBatch is a batch for the sink and what it took from the stream.
type fileBatch struct {
	batch        Batch
	bytes, lines int
	skipped      int
	err          error
}

// release frees the batch's staging, once.
func (b *fileBatch) release() {
	if b.batch.Staged != nil {
		b.batch.Staged.Release()
		b.batch.Staged = nil
	}
}

// events is how many events the batch holds.
func (b *fileBatch) events() int {
	if b.batch.Staged != nil {
		return b.batch.Staged.Len()
	}
	return len(b.batch.Events)
}

// newFileBatch opens an empty batch for size events: staged when the sink
// stages (stager not nil), else held as events.
func newFileBatch(stager StagingSink, size int) *fileBatch {
	b := &fileBatch{}
	if stager != nil {
		b.batch.Staged = stager.NewStaging(size)
	}
	return b
}

// take adds as many of events as the batch has room for up to size (a
// batch that would overfill is split between two, so that every batch but
// the last is exactly one row group) and returns the rest. Repeated ids
// are not staged: the room is what the batch holds.
func (b *fileBatch) take(events []audit.Event, size int) []audit.Event {
	k := min(len(events), size-b.events())
	if b.batch.Staged != nil {
		b.batch.Staged.Add(events[:k], nil)
	} else {
		b.batch.Events = append(b.batch.Events, events[:k]...)
	}
	return events[k:]
}

// assembleBatches decodes the chunks and fills batches of size events:
// staged as they come when the sink stages (a chunk that would overfill a
// batch is split between two, so that every batch but the last is exactly
// one row group), else as events. A decode or read error ends the stream
// with the batch in hand.
func assembleBatches(ctx context.Context, in <-chan readChunk, out chan<- fileBatch, dec *Decoder, sink Sink, size int) {
	defer close(out)
	stager, _ := sink.(StagingSink)
	fresh := func() *fileBatch { return newFileBatch(stager, size) }
	send := func(b *fileBatch) bool {
		select {
		case out <- *b:
			return true
		case <-ctx.Done():
			b.release()
			return false
		}
	}
	cur := fresh()
	if dec.mapped {
		// This goroutine stages strings that lie in the mapped file.
		debug.SetPanicOnFault(true)
	}
	var decoded Decoded
	for c := range in {
		decoded.Events, decoded.Dead, decoded.Formats, decoded.Skipped = decoded.Events[:0], nil, decoded.Formats[:0], 0
		// The lines lie in slabs nothing writes again (or in a mapped
		// file): the events' strings can alias them instead of copying
		// each line.
		err := dec.decodeAppend(ctx, c.msgs, &decoded, true)
		if err == nil {
			err = c.err
		}
		cur.bytes += c.bytes
		cur.lines += len(c.msgs)
		cur.skipped += decoded.Skipped
		cur.batch.DeadLetters = append(cur.batch.DeadLetters, decoded.Dead...)
		for events := decoded.Events; len(events) > 0; {
			var fault error
			events, fault = cur.takeGuarded(events, size, dec.mapped)
			if fault != nil {
				// A batch staged part-way is not stored: the file
				// changed under it.
				cur.release()
				send(&fileBatch{err: fmt.Errorf("stage %s: %w", c.where(), fault)})
				return
			}
			if cur.events() >= size {
				if !send(cur) {
					return
				}
				cur = fresh()
			}
		}
		clear(decoded.Events) // drop the strings: the staging holds copies
		if err != nil {
			cur.err = err
			send(cur)
			return
		}
	}
	send(cur)
}

// takeGuarded is take, returning a fault reading the events' strings as
// an error when they lie in a mapped file (guarded).
func (b *fileBatch) takeGuarded(events []audit.Event, size int, guarded bool) (rest []audit.Event, fault error) {
	if guarded {
		defer catchFault(&fault)
	}
	return b.take(events, size), nil
}

// readLine returns the next line without its newline, and the number of bytes
// consumed. A line longer than limit is consumed to its end but only its first
// limit+1 bytes are kept, enough for the decoder to reject it as too large;
// whole is then the size and SHA-256 of all of it, for its dead letter.
func readLine(br *bufio.Reader, limit int) (line []byte, n int, whole *Digest, err error) {
	var s slab // a buffer of the line's own size
	return s.readLine(br, limit)
}

// slabBytes is the size of a slab: lines are copied into large shared
// buffers rather than one allocation each (1M lines: 1M allocations of
// ~500 bytes fewer for the garbage collector to track).
const slabBytes = 1 << 20

// slab is where readLine keeps the lines it returns: each line is appended
// to the current buffer, which is never written again below its length, so
// a line (and every string a decoder borrows from it) stays valid for as
// long as it is referenced; a line that does not fit starts a new buffer
// of at least size bytes.
type slab struct {
	buf  []byte
	size int
}

// readLine is readLine keeping the line in s.
func (s *slab) readLine(br *bufio.Reader, limit int) (line []byte, n int, whole *Digest, err error) {
	start := len(s.buf)
	var h hash.Hash // of the whole line, once it is longer than the kept part
	size := 0
	add := func(body []byte) {
		if size == 0 {
			body = audit.TrimLeadingSpace(body) // not counted against the limit
		}
		size += len(body)
		kept := len(s.buf) - start
		if h == nil && kept+len(body) > limit {
			h = sha256.New()
			h.Write(s.buf[start:])
		}
		if h != nil {
			h.Write(body)
		}
		if kept <= limit {
			keep := body
			if room := limit + 1 - kept; len(keep) > room {
				keep = keep[:room]
			}
			start = s.append(start, keep)
		}
	}
	// A fragment (the line is longer than the reader's buffer) that ends
	// in '\r' holds it back: it is the line's CRLF ending, dropped, only
	// when the line ends right after it.
	cr := false
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		more := errors.Is(err, bufio.ErrBufferFull)
		body := bytes.TrimSuffix(frag, []byte("\n"))
		if cr && (more || len(body) > 0) {
			add([]byte("\r"))
		}
		cr = false
		if more && bytes.HasSuffix(body, []byte("\r")) {
			body, cr = body[:len(body)-1], true
		}
		if !more {
			body = bytes.TrimSuffix(body, []byte("\r"))
		}
		add(body)
		if more {
			continue
		}
		if h != nil {
			whole = &Digest{Size: size}
			h.Sum(whole.Sum[:0])
		}
		line = s.buf[start:len(s.buf):len(s.buf)]
		return line, n, whole, err
	}
}

// append adds b to the line that starts at start in s.buf, moving the line
// to a new buffer when s.buf has no room for it, and returns where the line
// now starts.
func (s *slab) append(start int, b []byte) int {
	if len(s.buf)+len(b) <= cap(s.buf) {
		s.buf = append(s.buf, b...)
		return start
	}
	line := s.buf[start:]
	next := make([]byte, 0, max(s.size, 2*(len(line)+len(b))))
	next = append(append(next, line...), b...)
	s.buf = next
	return 0
}
