package api

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"unicode/utf8"
)

// flushAt is how much standard output a frame gathers before it is sent.
const flushAt = 32 << 10

// frameWriter streams an answer as newline-delimited frames, keeping the
// order in which the command wrote to its standard output and error.
type frameWriter struct {
	mu      sync.Mutex
	start   func() // before the first frame (the HTTP status line)
	flush   func() error
	enc     *json.Encoder
	started bool
	out     []byte // standard output not yet sent
	trunc   bool
	err     error // the client went away: later frames are dropped
}

func newFrameWriter(w http.ResponseWriter) *frameWriter {
	return &frameWriter{
		start: func() {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		},
		flush: http.NewResponseController(w).Flush,
		enc:   json.NewEncoder(w),
	}
}

// newBufferWriter writes the frames into w unflushed, for an answer that
// travels as one message (NATS).
func newBufferWriter(w io.Writer) *frameWriter {
	return &frameWriter{start: func() {}, flush: func() error { return nil }, enc: json.NewEncoder(w)}
}

func (f *frameWriter) send(fr Frame, flush bool) {
	if f.err != nil {
		return
	}
	if !f.started {
		f.start()
		f.started = true
	}
	if f.err = f.enc.Encode(fr); f.err == nil && flush {
		f.err = f.flush()
	}
}

// sendOut sends the gathered standard output. Bytes that are not UTF-8
// (a BLOB printed raw) go base64-encoded so that they arrive unchanged.
func (f *frameWriter) sendOut(flush bool) {
	if len(f.out) == 0 {
		return
	}
	fr := Frame{}
	if utf8.Valid(f.out) {
		fr.Stdout = string(f.out)
	} else {
		fr.StdoutBytes = append([]byte(nil), f.out...)
	}
	f.out = f.out[:0]
	f.send(fr, flush)
}

type stream struct {
	f      *frameWriter
	stderr bool
}

func (s stream) Write(p []byte) (int, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.stderr {
		f.sendOut(false)
		f.send(Frame{Stderr: string(p)}, true)
		return len(p), nil
	}
	// Cut only at a rune boundary, so that every frame is valid text.
	f.out = append(f.out, p...)
	for len(f.out) > flushAt {
		cut := flushAt
		for cut > flushAt-utf8.UTFMax && !utf8.RuneStart(f.out[cut]) {
			cut--
		}
		rest := append([]byte(nil), f.out[cut:]...)
		f.out = f.out[:cut]
		f.sendOut(true)
		f.out = append(f.out, rest...)
	}
	if f.err != nil {
		return 0, f.err
	}
	return len(p), nil
}

func (f *frameWriter) stream(stderr bool) io.Writer { return stream{f: f, stderr: stderr} }

func (f *frameWriter) truncated() {
	f.mu.Lock()
	f.trunc = true
	f.mu.Unlock()
}

func (f *frameWriter) file(file File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendOut(false)
	f.send(Frame{File: &file}, false)
}

// exit ends the answer.
func (f *frameWriter) exit(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendOut(false)
	if f.trunc {
		f.send(Frame{Truncated: true}, false)
	}
	f.send(Frame{Exit: &code}, true)
}
