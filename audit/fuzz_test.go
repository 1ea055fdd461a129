package audit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"
)

// The fuzz targets decode arbitrary bytes with each format and check the
// invariants: no panic; a rejection has a known reason; an event passes
// validation; the scanner agrees with json.Valid; canonical arguments equal
// encoding/json's; decoding is deterministic. Seed corpora live in
// testdata/fuzz/<FuzzName>/.

func FuzzDecodeNative(f *testing.F)      { fuzzDecode(f, FormatNative) }
func FuzzDecodeCloudEvents(f *testing.F) { fuzzDecode(f, FormatCloudEvents) }
func FuzzDecodeIntercept(f *testing.F)   { fuzzDecode(f, FormatIntercept) }
func FuzzDecodeDocker(f *testing.F)      { fuzzDecode(f, FormatDocker) }
func FuzzDecodeAuto(f *testing.F)        { fuzzDecode(f, FormatAuto) }

func fuzzDecode(f *testing.F, format Format) {
	for _, line := range [][]byte{benchNative, benchCloudEvents, benchIntercept, benchDocker} {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, opts := range []Options{
			{Format: format},
			{Format: format, StoreArgs: true, Server: "fuzz-server", MaxEventBytes: 4096, MaxFieldBytes: 24},
		} {
			res, err := Decode(line, opts)
			checkInvariants(t, line, opts, res, err)
			again, err2 := Decode(line, opts)
			if !reflect.DeepEqual(res, again) || !reflect.DeepEqual(err, err2) {
				t.Fatalf("Decode is not deterministic: %+v %v / %+v %v", res, err, again, err2)
			}
		}
	})
}

func checkInvariants(t *testing.T, line []byte, opts Options, res Result, err error) {
	t.Helper()
	o := opts.withDefaults()
	if err != nil {
		rej, ok := err.(*Rejection)
		if !ok {
			t.Fatalf("error is %T, not *Rejection: %v", err, err)
		}
		if !KnownReason(rej.Reason) || rej.Detail == "" || !utf8.ValidString(rej.Error()) {
			t.Fatalf("bad rejection %q", rej.Error())
		}
		if res.Kind != 0 {
			t.Fatalf("rejection with kind %v", res.Kind)
		}
	} else {
		switch res.Kind {
		case KindEvent, KindSkipped, KindInterceptStartup:
		default:
			t.Fatalf("no error and kind %v", res.Kind)
		}
		if opts.Format != FormatAuto && res.Format != opts.Format {
			t.Fatalf("decoded as %s with --format %s", res.Format, opts.Format)
		}
	}
	checkSyntaxAgreement(t, line, o, res, err)
	if err != nil || res.Kind != KindEvent {
		return
	}
	e := res.Event
	if res.Format == FormatIntercept && e.Server == "" {
		e.Server = "resolved-later" // InterceptServers.Apply's job
	}
	if verr := e.Validate(opts); verr != nil {
		t.Fatalf("decoded event fails validation: %v\n%+v", verr, e)
	}
	if e.TS.Location().String() != "UTC" {
		t.Fatalf("ts not in UTC: %v", e.TS)
	}
	if opts.Server != "" && e.Server != opts.Server {
		t.Fatalf("server %q, want --server %q", e.Server, opts.Server)
	}
	if !opts.StoreArgs && e.Args != nil {
		t.Fatal("args kept without StoreArgs")
	}
	if e.Args != nil {
		if want := stdCanonical(t, e.Args); !bytes.Equal(want, e.Args) {
			t.Fatalf("canonical args %s re-encode as %s", e.Args, want)
		}
		if sha(e.Args) != e.ArgsHash {
			t.Fatalf("args_hash %s does not hash %s", e.ArgsHash, e.Args)
		}
	}
	if res.Format == FormatNative && opts.StoreArgs {
		// The canonical form equals encoding/json's for the original args.
		var top map[string]json.RawMessage
		if json.Unmarshal(line, &top) == nil {
			if raw, ok := top["args"]; ok && len(raw) > 0 && raw[0] == '{' {
				if want := stdCanonical(t, raw); !bytes.Equal(want, e.Args) {
					t.Fatalf("canonical args %s, encoding/json gives %s", e.Args, want)
				}
			}
		}
	}
	checkRoundTrip(t, e, opts)
}

// checkRoundTrip: an event marshalled with encoding/json (as the simulator
// writes it) decodes as native v1 to the same event.
func checkRoundTrip(t *testing.T, e Event, opts Options) {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatalf("event does not marshal: %v", err)
	}
	opts.Format = FormatNative
	opts.StoreArgs = e.Args != nil
	opts.Server = ""
	back, err := Decode(b, opts)
	if ReasonOf(err) == ReasonTooLarge {
		return // escaping can make the encoding longer than the line
	}
	if err != nil {
		t.Fatalf("marshalled event %s does not decode: %v", b, err)
	}
	if !reflect.DeepEqual(e, back.Event) {
		t.Fatalf("round trip changed the event:\n%+v\n%+v", e, back.Event)
	}
}

// checkSyntaxAgreement holds the scanner to json.Valid for input that got
// past the size and encoding checks.
func checkSyntaxAgreement(t *testing.T, line []byte, o Options, res Result, err error) {
	t.Helper()
	b := trimSpace(line)
	if len(b) == 0 || len(b) > o.MaxEventBytes || !utf8.Valid(b) || !o.Format.Valid() {
		return
	}
	reason := ReasonOf(err)
	if !json.Valid(b) {
		if reason != ReasonMalformedJSON {
			t.Fatalf("json.Valid rejects the line, Decode gives %q (%v)", reason, err)
		}
		return
	}
	if b[0] == '{' && reason == ReasonMalformedJSON && res.Format != FormatCloudEvents {
		t.Fatalf("json.Valid accepts the object, Decode rejects it: %v", err)
	}
}

// FuzzCanonicalArgs holds the canonical argument encoding, and its keys, to
// encoding/json's on arbitrary objects.
func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"b":1,"a":[1.0,-0,1e3]}`, `{"k<&>":"\u2028 \ud800 \ud83d\ude00"}`, `{"a":1,"a":{"z":null,"y":true}}`,
		"{\"raw\":\"\u2029<\"}", `{"\u0000":"\u001f\b\f"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		canon, hash, keys, err := CanonicalArgsKeys(args)
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var v map[string]any
		stdErr := dec.Decode(&v)
		if stdErr == nil && dec.More() {
			stdErr = errSyntax // trailing data
		}
		if err != nil {
			if !KnownReason(ReasonOf(err)) {
				t.Fatalf("unknown reason: %v", err)
			}
			if stdErr == nil && utf8.Valid(args) && json.Valid(args) && v != nil {
				t.Fatalf("CanonicalArgs rejects what encoding/json accepts: %v", err)
			}
			return
		}
		if stdErr != nil || v == nil {
			t.Fatalf("CanonicalArgs accepts what encoding/json rejects (%v): %q", stdErr, args)
		}
		want, _ := json.Marshal(v)
		if !bytes.Equal(canon, want) {
			t.Fatalf("canonical %s, encoding/json %s", canon, want)
		}
		if hash != sha(want) {
			t.Fatal("hash mismatch")
		}
		var wantKeys []string
		for k := range v {
			wantKeys = append(wantKeys, k)
		}
		slices.Sort(wantKeys)
		if !slices.Equal(keys, wantKeys) || (keys == nil) != (wantKeys == nil) {
			t.Fatalf("keys %q, encoding/json's %q", keys, wantKeys)
		}
	})
}

var errSyntax = &json.SyntaxError{}
