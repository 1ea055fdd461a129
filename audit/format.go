package audit

import (
	"fmt"
	"strings"
)

// Format is an input format accepted by Decode.
type Format string

// The accepted input formats (SPEC §1). FormatAuto detects the format per line.
const (
	FormatAuto        Format = "auto"
	FormatNative      Format = "native"      // the v1 event of SPEC §1
	FormatCloudEvents Format = "cloudevents" // CloudEvents 1.0 structured mode carrying a v1 event
	FormatIntercept   Format = "intercept"   // PolicyLayer Intercept JSONL
	FormatDocker      Format = "docker"      // docker/mcp-gateway audit events
)

// Formats lists every accepted format in the order of the --format help text.
var Formats = []Format{FormatAuto, FormatNative, FormatCloudEvents, FormatIntercept, FormatDocker}

// Valid reports whether f is one of Formats.
func (f Format) Valid() bool {
	switch f {
	case FormatAuto, FormatNative, FormatCloudEvents, FormatIntercept, FormatDocker:
		return true
	}
	return false
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// ParseFormat parses a --format value (case-insensitive; empty means auto).
func ParseFormat(s string) (Format, error) {
	f := Format(strings.ToLower(strings.TrimSpace(s)))
	if f == "" {
		return FormatAuto, nil
	}
	if !f.Valid() {
		return "", fmt.Errorf("unknown input format %q: allowed values are %s", s, formatList())
	}
	return f, nil
}

// Default limits of SPEC §1 (ingest.max_event_bytes and the string field limit).
const (
	DefaultMaxEventBytes = 64 << 10
	DefaultMaxFieldBytes = 1 << 10
	// MaxIDBytes is the fixed limit of the id field: it is the de-duplication key.
	MaxIDBytes = 128
)

// Options controls decoding. The zero value decodes with auto-detection and
// the default limits.
type Options struct {
	Format        Format // FormatAuto when empty
	MaxEventBytes int    // DefaultMaxEventBytes when 0
	MaxFieldBytes int    // DefaultMaxFieldBytes when 0
	StoreArgs     bool   // keep Event.Args (argument values can hold secrets)
	// Server, when set, names the server of every event (ingest --server NAME).
	// Intercept needs it most: its startup line records only the upstream
	// command's base name (npx, python3) or URL.
	Server string
	// Borrow lets the event's strings alias the payload instead of a copy of
	// it: for callers that never modify or reuse the payload afterwards
	// (NATS messages, whose payloads the client allocates one by one; file
	// lines, which ingest reads into buffers it never writes again).
	Borrow bool
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.Format == "" {
		o.Format = FormatAuto
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.MaxFieldBytes <= 0 {
		o.MaxFieldBytes = DefaultMaxFieldBytes
	}
	return o
}
