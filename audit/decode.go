package audit

import (
	"crypto/sha256"
	"unicode/utf8"
	"unsafe"
)

// Kind says what a decoded line is.
type Kind uint8

// The kinds of Result. The zero Kind only accompanies an error.
const (
	KindEvent            Kind = iota + 1 // an event to store
	KindSkipped                          // counted and skipped: a blank line, an Intercept heartbeat, a docker prompt event…
	KindInterceptStartup                 // an Intercept startup line: feeds InterceptServers
)

func (k Kind) String() string {
	switch k {
	case KindEvent:
		return "event"
	case KindSkipped:
		return "skipped"
	case KindInterceptStartup:
		return "intercept_startup"
	}
	return "invalid"
}

// Result is a decoded line or message.
type Result struct {
	Kind   Kind
	Format Format // the format the line was decoded as (detected under FormatAuto)
	Event  Event  // KindEvent only
	// KindInterceptStartup only: the instance id and the server its startup
	// line names (the upstream command's base name or URL).
	Instance       string
	InstanceServer string
	// Skipped says what a KindSkipped line was: "blank", the Intercept line
	// type ("heartbeat", "shutdown", …) or "target_type <t>" for docker.
	Skipped string
}

// Decode decodes and validates one line of a JSONL file or one NATS message.
//
// It is pure and safe for concurrent use: ingest decodes in parallel and then
// applies InterceptServers in input order. A rejected payload yields a
// *Rejection (see ReasonOf) together with a Result whose Format is the format
// the payload was decoded as (FormatAuto when it could not be detected), for
// the dead letter.
//
// With FormatAuto the format is detected per line: CloudEvents has
// "specversion" and "data" (or "data_base64"); Intercept has "type" and
// "instance"; docker/mcp-gateway has "server_name" or "tool_name" and "result"
// or "timestamp"; a line with any v1 field ("ts", "server", "tool",
// "decision", "method") is native; anything else is unknown_format.
//
// An event without an id gets a derived one: "sha256:" followed by the hex of
// the first 16 bytes of the SHA-256 of the payload with surrounding white
// space trimmed, so that an exact redelivery de-duplicates while any change in
// the payload gives a new id. With Options.Server (a re-label) the hash also
// covers the server name.
func Decode(line []byte, opts Options) (Result, error) {
	opts = opts.withDefaults()
	if !opts.Format.Valid() {
		return Result{Format: opts.Format}, reject(ReasonUnknownFormat, "unknown input format %q: allowed values are %s", opts.Format, formatList())
	}
	b := trimSpace(line)
	if len(b) == 0 {
		return Result{Kind: KindSkipped, Format: opts.Format, Skipped: "blank"}, nil
	}
	if len(b) > opts.MaxEventBytes {
		return Result{Format: opts.Format}, reject(ReasonTooLarge,
			"payload is %d bytes, over the limit of %d (ingest.max_event_bytes)", len(b), opts.MaxEventBytes)
	}
	if !utf8.Valid(b) {
		return Result{Format: opts.Format}, reject(ReasonNotUTF8,
			"invalid UTF-8 at byte %d: the payload must be UTF-8 encoded JSON", invalidUTF8At(b))
	}
	// One copy of the line (or the line itself, borrowed): every string of
	// the event is a substring of it.
	var src string
	if opts.Borrow {
		src = unsafe.String(unsafe.SliceData(b), len(b))
	} else {
		src = string(b)
	}
	var buf [32]field
	fs, err := parseTop(src, buf[:0])
	if err != nil {
		return Result{Format: opts.Format}, err
	}
	f := opts.Format
	if f == FormatAuto {
		if f = detect(fs); f == "" {
			return Result{Format: FormatAuto}, reject(ReasonUnknownFormat,
				`not a known event format: a v1 event has "ts", "server", "tool" and "decision"; `+
					`CloudEvents has "specversion" and "data"; Intercept has "type" and "instance"; `+
					`docker/mcp-gateway has "server_name", "tool_name" and "result"`)
		}
	}
	d := decoder{src: src, line: b, opts: opts}
	res := Result{Kind: KindEvent, Format: f}
	switch f {
	case FormatNative:
		err = d.native(&res.Event, src, fs)
		if err == nil {
			err = d.finish(&res.Event, true)
		}
	case FormatCloudEvents:
		err = d.cloudEvents(&res, fs)
	case FormatIntercept:
		err = d.intercept(&res, fs)
	case FormatDocker:
		err = d.docker(&res, fs)
	}
	if err != nil {
		if opts.Format != FormatAuto {
			addFormatHint(err, opts.Format, detect(fs))
		}
		return Result{Format: f}, err
	}
	return res, nil
}

// decoder holds the state of one Decode call.
type decoder struct {
	src  string // the trimmed line
	line []byte // the same bytes, for the derived id
	opts Options
}

// finish applies what every format shares: the --server override, the
// default method, the derived id, and validation.
func (d *decoder) finish(e *Event, requireServer bool) error {
	if d.opts.Server != "" {
		e.Server = d.opts.Server
	}
	if e.Method == "" {
		e.Method = DefaultMethod
	}
	if e.ID == "" {
		e.ID = DerivedID(d.line)
		if d.opts.Server != "" {
			// Re-labelled (ingest --server): the label is part of what the
			// event is, so the same line ingested under two names is two
			// events, and under one name one.
			e.ID = derivedIDFor(d.opts.Server, d.line)
		}
	}
	return e.validate(d.opts, requireServer)
}

// DerivedID is the id of an event that carries none: "sha256:" and the hex of
// the first 16 bytes of the SHA-256 of the payload, trimmed of surrounding
// white space.
func DerivedID(payload []byte) string {
	sum := sha256.Sum256(trimSpace(payload))
	return hashString(sum[:16])
}

// derivedIDFor is DerivedID of a payload re-labelled with a server name.
func derivedIDFor(server string, payload []byte) string {
	h := sha256.New()
	h.Write(trimSpace(payload))
	h.Write([]byte("\x00server="))
	h.Write([]byte(server))
	var sum [sha256.Size]byte
	return hashString(h.Sum(sum[:0])[:16])
}

// detect returns the format of a top-level object by its keys, or "".
func detect(fs []field) Format {
	var spec, data, typ, inst, dockerName, dockerRes, native, decision bool
	for _, f := range fs {
		switch f.key {
		case "specversion":
			spec = true
		case "data", "data_base64":
			data = true
		case "type":
			typ = true
		case "instance":
			inst = true
		case "server_name", "tool_name":
			dockerName = true
		case "result", "timestamp":
			dockerRes = true
		case "decision":
			decision = true
		case "ts", "server", "tool", "method":
			native = true
		}
	}
	switch {
	case spec && data:
		return FormatCloudEvents
	case decision:
		// Only the v1 event has a decision (Intercept and docker write
		// result): a v1 event whose unknown fields happen to be named as
		// theirs (type and instance, tool_name and result) is still one.
		return FormatNative
	case typ && inst:
		return FormatIntercept
	case dockerName && dockerRes:
		return FormatDocker
	case native:
		return FormatNative
	}
	return ""
}

// addFormatHint tells the user of an explicit --format that the line looks
// like another format.
func addFormatHint(err error, want, looks Format) {
	r, ok := err.(*Rejection)
	if !ok || looks == "" || looks == want {
		return
	}
	switch r.Reason {
	case ReasonTooLarge, ReasonNotUTF8, ReasonMalformedJSON:
		return
	}
	r.Detail += " (decoded as " + string(want) + " but the line looks like " + string(looks) +
		" input: try --format " + string(looks) + " or --format auto)"
}

// TrimLeadingSpace is b without its leading JSON white space (space, tab,
// CR, LF): what a payload's size is counted without.
func TrimLeadingSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

func trimSpace(b []byte) []byte {
	b = TrimLeadingSpace(b)
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// prefixed adds context to a rejection's detail.
func prefixed(err error, prefix string) error {
	if r, ok := err.(*Rejection); ok {
		return &Rejection{Reason: r.Reason, Detail: prefix + r.Detail}
	}
	return err
}
