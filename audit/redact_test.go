package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactArgs(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct{ name, in, want string }{
		{"native args", `{"ts":"x", "tool":"login","args":{"user":"bob","password":"hunter2","n":1,"ok":true,"none":null}}`,
			`{"ts":"x", "tool":"login","args":{"user":"[redacted]","password":"[redacted]","n":"[redacted]","ok":"[redacted]","none":"[redacted]"}}`},
		{"nested keys and arrays keep their shape", `{"args": {"a": {"b": ["hunter2", {"c": 2}]}, "l": []}}`,
			`{"args": {"a":{"b":["[redacted]",{"c":"[redacted]"}]},"l":[]}}`},
		{"args of the wrong type", `{"args":"hunter2","x":1}`, `{"args":"[redacted]","x":1}`},
		{"escaped key", `{"a\u0072gs":{"k":"hunter2"}}`, `{"a\u0072gs":{"k":"[redacted]"}}`},
		{"MCP arguments at any depth", `{"params":{"name":"t","arguments":{"token":"hunter2"}},"l":[{"args":["hunter2"]}]}`,
			`{"params":{"name":"t","arguments":{"token":"[redacted]"}},"l":[{"args":["[redacted]"]}]}`},
		{"every occurrence", `{"args":{"a":"hunter2"},"args":{"b":"hunter2"}}`, `{"args":{"a":"[redacted]"},"args":{"b":"[redacted]"}}`},
		{"cloudevents data", `{"specversion":"1.0","data":{"server":"s","args":{"k":"hunter2"}}}`,
			`{"specversion":"1.0","data":{"server":"s","args":{"k":"[redacted]"}}}`},
		{"cloudevents data string", `{"specversion":"1.0","data":"{\"args\":{\"k\":\"hunter2\"}}"}`,
			`{"specversion":"1.0","data":"{\"args\":{\"k\":\"[redacted]\"}}"}`},
		{"cloudevents data_base64", `{"specversion":"1.0","data_base64":"` + b64(`{"args":{"k":"hunter2"}}`) + `"}`,
			`{"specversion":"1.0","data_base64":"` + b64(`{"args":{"k":"[redacted]"}}`) + `"}`},
		{"data string that is not JSON", `{"data":"hunter2"}`, `{"data":"[redacted]"}`},
		{"data string cut short", `{"specversion":"1.0","data":"{\"args\":{\"password\":\"hunter2\"}"}`, `{"specversion":"1.0","data":"[redacted]"}`},
		{"data string of another value", `{"data":"\"hunter2\""}`, `{"data":"[redacted]"}`},
		{"data_base64 that is not base64", `{"data_base64":"` + strings.TrimRight(b64(`{"args":{"k":"hunter2!"}}`), "=") + `"}`, `{"data_base64":"[redacted]"}`},
		{"data_base64 not UTF-8", `{"data_base64":"` + b64("{\"args\":{\"k\":\"hunter2\xff\"}}") + `"}`, `{"data_base64":"[redacted]"}`},
		{"data_base64 cut short", `{"data_base64":"` + b64(`{"args":{"k":"hunter2"}`) + `"}`, `{"data_base64":"[redacted]"}`},
		{"no arguments: unchanged", ` {"ts":"x","server":"s"} `, ` {"ts":"x","server":"s"} `},
		{"not an object: no value kept", `[{"args":{"k":"hunter2"}},{"data":"{\"args\":1}"},"hunter2"]`, `[{"args":{"k":"[redacted]"}},{"data":"[redacted]"},"[redacted]"]`},
		{"a value alone", ` "sk-live-hunter2"`, `"[redacted]"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := RedactArgs([]byte(tc.in))
			require.True(t, ok)
			assert.Equal(t, tc.want, string(got))
			assert.True(t, json.Valid(got))
			if strings.Contains(tc.want, Redacted) {
				assert.NotContains(t, string(got), "hunter2")
			}
		})
	}
}

// RedactValues keeps a payload's shape and no value: for one of no known
// format, whose arguments could be under any name.
func TestRedactValues(t *testing.T) {
	got, ok := RedactValues([]byte(`{"name": "DB_PASSWORD", "value": "hunter2", "n": [1, {"x": null}]}`))
	require.True(t, ok)
	assert.Equal(t, `{"name":"[redacted]","value":"[redacted]","n":["[redacted]",{"x":"[redacted]"}]}`, string(got))
	_, ok = RedactValues([]byte(`{"value": "hunter2"`))
	assert.False(t, ok)
}

func TestRedactArgsRefusesWhatIsNotJSON(t *testing.T) {
	for _, in := range []string{`{"args":{"k":"hunter2"}`, "{\"args\":{\"k\":\"hunter2\xff\"}}", `{"a":1} {"args":2}`, ``, `   `} {
		_, ok := RedactArgs([]byte(in))
		assert.False(t, ok, "%q", in)
	}
	d := PayloadDigest(sha256.Sum256([]byte("abc")), 3)
	assert.Equal(t, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad (3 bytes)", string(d))
}

// TestRedactArgsDeepNesting: each byte is read a bounded number of times, so
// the deepest payload the decoder accepts is redacted at once.
func TestRedactArgsDeepNesting(t *testing.T) {
	const depth = 9999
	in := `{"args":` + strings.Repeat(`{"a":`, depth) + `"hunter2"` + strings.Repeat(`}`, depth) + `}`
	got, ok := RedactArgs([]byte(in))
	require.True(t, ok)
	assert.Equal(t, strings.ReplaceAll(in, "hunter2", Redacted), string(got))
	in = strings.Repeat(`{"a":`, depth) + `{"args":"hunter2"}` + strings.Repeat(`}`, depth)
	got, ok = RedactArgs([]byte(in))
	require.True(t, ok)
	assert.Equal(t, strings.ReplaceAll(in, "hunter2", Redacted), string(got))
}

// FuzzRedactArgs: every valid UTF-8 JSON value is redacted into valid JSON
// in which no argument member keeps a scalar other than the placeholder
// (and no scalar at all when the value is no object); anything else is
// refused.
func FuzzRedactArgs(f *testing.F) {
	for _, s := range []string{`{"args":{"k":"v","n":[1,{"a":null}]}}`, `{"specversion":"1.0","data":"{\"args\":{\"k\":1}}"}`,
		`{"params":{"arguments":{"a":true}}}`, `[{"args":"x"}]`, `{"a\u0072gs":1}`, `{"args":{"k":"v"}`, "\"x\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, ok := RedactArgs(in)
		valid := utf8.Valid(in) && json.Valid(in)
		if ok != valid {
			t.Fatalf("ok %v for %q (valid %v)", ok, in, valid)
		}
		if !ok {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q redacted into invalid JSON %q", in, out)
		}
		var walk func(v any, inArgs bool)
		walk = func(v any, inArgs bool) {
			switch x := v.(type) {
			case map[string]any:
				for k, val := range x {
					walk(val, inArgs || argumentKeys[k])
				}
			case []any:
				for _, val := range x {
					walk(val, inArgs)
				}
			default:
				if inArgs && x != Redacted {
					t.Fatalf("%q kept an argument value %v: %q", in, x, out)
				}
			}
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber() // numbers out of float64's range are valid JSON
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		_, object := v.(map[string]any)
		walk(v, !object) // a payload that is no object keeps no value at all
	})
}

// A member named as arguments are, kept in attrs (a top-level string of no
// field of the format, or an attrs entry), keeps its value only with
// StoreArgs, in every format that keeps such members.
func TestArgumentMembersInAttrsAreRedacted(t *testing.T) {
	for _, line := range []string{
		`{"id":"n1","ts":"2026-11-30T10:00:00Z","server":"s","tool":"t","decision":"allowed","arguments":"{\"password\":\"hunter2\"}","attrs":{"args":"hunter2","region":"eu"}}`,
		`{"timestamp":"2026-11-30T10:00:00Z","server_name":"s","tool_name":"t","result":"allowed","arguments":"hunter2","region":"eu"}`,
		`{"type":"tool_call","instance":"i1","ts":"2026-11-30T10:00:00Z","server":"s","tool":"t","result":"allowed","args":"hunter2","region":"eu"}`,
	} {
		res, err := Decode([]byte(line), Options{})
		require.NoError(t, err, line)
		require.Equal(t, KindEvent, res.Kind, line)
		attrs := res.Event.Attrs
		assert.Equal(t, "eu", attrs["region"], "%s: other attrs kept", res.Format)
		for k, v := range attrs {
			assert.NotContains(t, v, "hunter2", "%s: attrs[%s]", res.Format, k)
		}
		kept, err := Decode([]byte(line), Options{StoreArgs: true})
		require.NoError(t, err)
		assert.Contains(t, fmt.Sprint(kept.Event.Attrs), "hunter2", "%s: kept when asked", res.Format)
	}
}
