package audit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// cloudEvents decodes a CloudEvents 1.0 event in structured mode whose data
// is a v1 event: an object, a JSON string holding one, or data_base64. The
// envelope's source and id (cloudEventsID) and time fill the event's id and
// ts when it lacks them.
func (d *decoder) cloudEvents(res *Result, fs []field) error {
	src := d.src
	var spec, ceSource, ceID, ceTime string
	data, data64 := -1, -1
	for i, f := range fs {
		var err error
		switch f.key {
		case "specversion":
			err = setString(src, f, &spec)
		case "source":
			// Read only to make an id (cloudEventsID): a source of
			// another type is left aside, as before it was read.
			if f.kind(src) == '"' {
				ceSource = stringValue(src, f)
			}
		case "id":
			err = setString(src, f, &ceID)
		case "time":
			err = setString(src, f, &ceTime)
		case "data":
			if f.kind(src) != 'n' {
				data = i
			}
		case "data_base64":
			if f.kind(src) != 'n' {
				data64 = i
			}
		}
		if err != nil {
			return prefixed(err, "CloudEvents envelope: ")
		}
	}
	switch spec {
	case "1.0":
	case "":
		return reject(ReasonBadField, `not a CloudEvents structured-mode event: no "specversion"`)
	default:
		return reject(ReasonBadField, "unsupported CloudEvents specversion %q: want 1.0", clip(spec))
	}

	var dsrc string
	var dbuf [32]field
	dfs := dbuf[:0]
	switch {
	case data >= 0:
		f := fs[data]
		switch f.kind(src) {
		case '{':
			dsrc, dfs = src, members(src, f, dfs)
		case '"':
			dsrc = stringValue(src, f)
			var err error
			if dfs, err = parseTop(dsrc, dfs); err != nil {
				return prefixed(err, "CloudEvents data string: ")
			}
		default:
			return badType("data", "a v1 event object (or a JSON string holding one)", src[f.vs])
		}
	case data64 >= 0:
		f := fs[data64]
		if f.kind(src) != '"' {
			return badType("data_base64", "a base64 string", src[f.vs])
		}
		raw, err := base64.StdEncoding.DecodeString(stringValue(src, f))
		if err != nil {
			return reject(ReasonBadField, "data_base64 is not valid base64 (RFC 4648): %v", err)
		}
		if !utf8.Valid(raw) {
			return reject(ReasonNotUTF8, "CloudEvents data_base64: invalid UTF-8 at byte %d of the decoded data", invalidUTF8At(raw))
		}
		dsrc = string(raw)
		if dfs, err = parseTop(dsrc, dfs); err != nil {
			return prefixed(err, "CloudEvents data_base64: ")
		}
	default:
		return reject(ReasonBadField, `CloudEvents event has no "data": it must carry a v1 event`)
	}

	e := &res.Event
	if err := d.native(e, dsrc, dfs); err != nil {
		return prefixed(err, "CloudEvents data: ")
	}
	if e.ID == "" {
		e.ID = cloudEventsID(ceSource, ceID)
	}
	if e.TS.IsZero() && ceTime != "" {
		t, err := parseTime(ceTime)
		if err != nil {
			return reject(ReasonBadTS, "CloudEvents \"time\" is %q, not an RFC 3339 time", clip(ceTime))
		}
		e.TS = t
	}
	return d.finish(e, true)
}

// cloudEventsID is the id of an event whose data has none. CloudEvents
// makes only source and id together unique: two gateways that both number
// their events from 1 would otherwise store one id twice, and the second
// event would be dropped as a duplicate. It is "<source> <id>" (a source is
// a URI reference, which holds no space), or, where that would pass
// MaxIDBytes or the source holds a space, "ce:sha256:" and the hex of the
// first 16 bytes of the SHA-256 of source, a NUL and id; the envelope's id
// alone without a source (which CloudEvents requires).
func cloudEventsID(source, id string) string {
	switch {
	case id == "" || source == "":
		return id
	case len(source)+1+len(id) <= MaxIDBytes && !strings.Contains(source, " "):
		return source + " " + id
	}
	sum := sha256.Sum256([]byte(source + "\x00" + id))
	return "ce:sha256:" + hex.EncodeToString(sum[:16])
}
