package audit

import (
	"slices"
	"strconv"
	"time"
)

// native decodes the members fs of a v1 event (SPEC §1) held in src into e.
// It checks types; Event.validate checks the rules.
func (d *decoder) native(e *Event, src string, fs []field) error {
	var ubuf [8]int
	unknown := ubuf[:0] // members whose string values go to attrs
	// argKeys is the last arg_keys array: an args object, when there is
	// one, gives the keys instead, so the array is only checked until the
	// end shows whether it is needed.
	attrs, args, argKeys := -1, -1, -1
	for i, f := range fs {
		var err error
		switch f.key {
		case "id":
			err = setString(src, f, &e.ID)
		case "ts":
			err = setTS(src, f, &e.TS)
		case "server":
			err = setString(src, f, &e.Server)
		case "tool":
			err = setString(src, f, &e.Tool)
		case "method":
			err = setString(src, f, &e.Method)
		case "decision":
			err = setString(src, f, (*string)(&e.Decision))
		case "status":
			err = setString(src, f, &e.Status)
		case "gateway":
			err = setString(src, f, &e.Gateway)
		case "grant":
			err = setString(src, f, &e.Grant)
		case "agent":
			err = setString(src, f, &e.Agent)
		case "session":
			err = setString(src, f, &e.Session)
		case "request_id":
			// JSON-RPC ids may be numbers: keep their literal text.
			err = setStringOrNumber(src, f, &e.RequestID)
		case "rule":
			err = setString(src, f, &e.Rule)
		case "reason":
			err = setString(src, f, &e.Reason)
		case "args_hash":
			err = setString(src, f, &e.ArgsHash)
		case "policy_version":
			err = setString(src, f, &e.PolicyVersion)
		case "error_code":
			err = setInt(src, f, &e.ErrorCode)
		case "latency_ms":
			err = setFloat(src, f, &e.LatencyMS)
		case "arg_keys":
			err = setStrings(src, f, nil)
			if f.kind(src) == '[' {
				argKeys = i
			}
		case "args":
			switch f.kind(src) {
			case '{':
				args = i
			case 'n': // the last occurrence wins, as in a map decode
				args = -1
			default:
				err = badType(f.key, "an object", src[f.vs])
			}
		case "attrs":
			switch f.kind(src) {
			case '{':
				attrs = i
			case 'n':
				attrs = -1
			default:
				err = badType(f.key, "an object of strings", src[f.vs])
			}
		default:
			if f.kind(src) == '"' {
				unknown = append(unknown, i)
			}
		}
		if err != nil {
			return err
		}
	}
	switch {
	case args >= 0:
		if err := applyArgs(e, src, fs[args], d.opts.StoreArgs); err != nil {
			return err
		}
	case argKeys >= 0:
		if err := setStrings(src, fs[argKeys], &e.ArgKeys); err != nil {
			return err
		}
	}
	if len(unknown) > 0 || attrs >= 0 {
		e.Attrs = d.buildAttrs(src, fs, unknown, attrs)
	}
	return nil
}

// buildAttrs collects the string values of unknown members and of the attrs
// object; an explicit attrs entry wins over a top-level field of the same name.
// A member named as arguments are (argumentKeys) keeps its value only with
// Options.StoreArgs: a gateway that sends them as a string under a name of
// its own must not put them at rest where args would not be.
func (d *decoder) buildAttrs(src string, fs []field, unknown []int, attrs int) map[string]string {
	var mbuf [16]field
	var ms []field
	if attrs >= 0 {
		ms = members(src, fs[attrs], mbuf[:0])
	}
	m := make(map[string]string, len(unknown)+len(ms))
	value := func(f field) string {
		if !d.opts.StoreArgs && argumentKeys[f.key] {
			return Redacted
		}
		return stringValue(src, f)
	}
	for _, i := range unknown {
		m[fs[i].key] = value(fs[i])
	}
	for _, f := range ms {
		if f.kind(src) == '"' {
			m[f.key] = value(f)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func badType(key, want string, got byte) *Rejection {
	return reject(ReasonBadField, "%q must be %s, got %s", clip(key), want, kindName(got))
}

// setString sets *dst from a string member; null leaves it unset.
func setString(src string, f field, dst *string) error {
	switch f.kind(src) {
	case '"':
		*dst = stringValue(src, f)
	case 'n':
	default:
		return badType(f.key, "a string", src[f.vs])
	}
	return nil
}

// setStringOrNumber is setString that also takes a number as its literal text.
func setStringOrNumber(src string, f field, dst *string) error {
	switch c := f.kind(src); {
	case c == '"':
		*dst = stringValue(src, f)
	case c == '-' || '0' <= c && c <= '9':
		*dst = src[f.vs:f.ve]
	case c == 'n':
	default:
		return badType(f.key, "a string or a number", c)
	}
	return nil
}

// setTS parses an RFC 3339 time (nanoseconds allowed) and stores it in UTC.
// An empty string counts as missing.
func setTS(src string, f field, dst *time.Time) error {
	switch f.kind(src) {
	case '"':
		v := stringValue(src, f)
		if v == "" {
			*dst = time.Time{}
			return nil
		}
		t, err := parseTime(v)
		if err != nil {
			return reject(ReasonBadTS, "%q is %q, not an RFC 3339 time such as \"2026-11-03T14:05:09.123Z\"", f.key, clip(v))
		}
		*dst = t
	case 'n':
	default:
		return reject(ReasonBadTS, "%q must be an RFC 3339 time string, got %s", f.key, kindName(src[f.vs]))
	}
	return nil
}

// parseTime parses an RFC 3339 time strictly (time.Parse also takes, say,
// a one-digit hour) and returns it in UTC: YYYY-MM-DDTHH:MM:SS, an optional
// fraction (digits past nanoseconds are dropped), then Z or ±HH:MM. The
// separator may be T, t or a space (RFC 3339 §5.6 note). Times outside the
// years 1–9999 in UTC, and the zero time (which means "absent" in Event), are
// refused.
func parseTime(v string) (time.Time, error) {
	if len(v) < 20 || v[4] != '-' || v[7] != '-' || v[13] != ':' || v[16] != ':' ||
		(v[10] != 'T' && v[10] != 't' && v[10] != ' ') {
		return time.Time{}, badTime()
	}
	year, ok1 := digits(v[0:4])
	month, ok2 := digits(v[5:7])
	day, ok3 := digits(v[8:10])
	hour, ok4 := digits(v[11:13])
	minute, ok5 := digits(v[14:16])
	sec, ok6 := digits(v[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(time.Month(month), year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, badTime()
	}
	i, nsec := 19, 0
	if i < len(v) && v[i] == '.' {
		i++
		start := i
		for i < len(v) && '0' <= v[i] && v[i] <= '9' {
			if i-start < 9 {
				nsec = nsec*10 + int(v[i]-'0')
			}
			i++
		}
		n := i - start
		if n == 0 {
			return time.Time{}, badTime()
		}
		for ; n < 9; n++ {
			nsec *= 10
		}
	}
	offset := 0
	switch rest := v[i:]; {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := digits(rest[1:3])
		om, okm := digits(rest[4:6])
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, badTime()
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, badTime()
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC).Add(-time.Duration(offset) * time.Second)
	if t.Year() < 1 || t.Year() > 9999 || t.IsZero() {
		return time.Time{}, reject(ReasonBadTS, "time out of range")
	}
	return t, nil
}

// badTime is parseTime's rejection, made only when a time is bad: it formats
// a message, which cost 0.2 µs on every event when made up front.
func badTime() error { return reject(ReasonBadTS, "not an RFC 3339 time") }

// digits parses a fixed-width decimal field.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(m time.Month, year int) int {
	if m == time.February {
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	}
	return 31 - int((m-1)%7%2)
}

func setInt(src string, f field, dst **int64) error {
	switch c := f.kind(src); {
	case c == '-' || '0' <= c && c <= '9':
		n, err := strconv.ParseInt(src[f.vs:f.ve], 10, 64)
		if err != nil {
			return reject(ReasonBadField, "%q is %s: want an integer", f.key, clip(src[f.vs:f.ve]))
		}
		*dst = &n
	case c == 'n':
	default:
		return badType(f.key, "an integer", c)
	}
	return nil
}

func setFloat(src string, f field, dst **float64) error {
	switch c := f.kind(src); {
	case c == '-' || '0' <= c && c <= '9':
		x, err := strconv.ParseFloat(src[f.vs:f.ve], 64)
		if err != nil {
			return reject(ReasonBadField, "%q is %s: out of range", f.key, clip(src[f.vs:f.ve]))
		}
		*dst = &x
	case c == 'n':
	default:
		return badType(f.key, "a number", c)
	}
	return nil
}

// setStrings takes an array of strings, sorted (arg_keys are sorted names);
// with dst nil it only checks the array.
func setStrings(src string, f field, dst *[]string) error {
	switch f.kind(src) {
	case '[':
	case 'n':
		return nil
	default:
		return badType(f.key, "an array of strings", src[f.vs])
	}
	var out []string
	i := skipSpace(src, f.vs+1)
	for src[i] != ']' {
		if src[i] != '"' {
			return badType(f.key, "an array of strings", src[i])
		}
		end, esc, _ := scanString(src, i)
		if dst != nil {
			out = append(out, stringValue(src, field{vs: i, ve: end, esc: esc}))
		}
		i = skipSpace(src, end)
		if src[i] == ',' {
			i = skipSpace(src, i+1)
		}
	}
	if dst != nil {
		slices.Sort(out)
		*dst = out
	}
	return nil
}
