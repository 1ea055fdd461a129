package otlp

import (
	"context"
	"testing"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/simulate"
)

// TestTracesRequestRoundTrip: simulated events written as spans come back as
// the same calls through both encodings.
func TestTracesRequestRoundTrip(t *testing.T) {
	var events []audit.Event
	_, err := simulate.Generate(context.Background(), simulate.Options{Seed: 3, Count: 2000, Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		func(e audit.Event) error { events = append(events, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	req := TracesRequest(events, EncodeOptions{})
	for _, enc := range []Encoding{Protobuf, JSON} {
		res := FromTraces(roundTrip(t, req, enc), Options{StoreArgs: true})
		if len(res.Events) != len(events) || res.RejectedCount() != 0 || len(res.Dropped) != 0 {
			t.Fatalf("encoding %d: %d events of %d, rejected %v (%s), dropped %v", enc, len(res.Events), len(events), res.Rejected, res.Message, res.Dropped)
		}
		// Spans are grouped by gateway: match by the span each event became.
		got := map[string]audit.Event{}
		for _, e := range res.Events {
			got[e.ID] = e
		}
		for i := range events {
			w := events[i]
			sp := Span(&w, EncodeOptions{})
			g, ok := got["otlp:"+hexOf(sp.TraceId)+":"+hexOf(sp.SpanId)]
			if !ok {
				t.Fatalf("event %s: no span came back", w.ID)
			}
			w.ID, g.ID, w.Attrs, g.Attrs = "", "", nil, nil
			if w.Method == "" {
				w.Method = audit.DefaultMethod
			}
			if w.Session == "" {
				g.Session = ""
			}
			if w.Status == "" && w.Decision == audit.Allowed {
				w.Status = "ok"
			}
			if eventString(w) != eventString(g) {
				t.Fatalf("encoding %d:\nwant %s\ngot  %s", enc, eventString(w), eventString(g))
			}
		}
	}
}

// TestStatelessSpansCorrelateByTrace: without mcp.session.id, the calls of
// one simulated session come back with one trace id (the store's session,
// SPEC §3), and different sessions with different ones.
func TestStatelessSpansCorrelateByTrace(t *testing.T) {
	var events []audit.Event
	_, err := simulate.Generate(context.Background(), simulate.Options{Seed: 5, Count: 3000, Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		func(e audit.Event) error { events = append(events, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	res := FromTraces(roundTrip(t, TracesRequest(events, EncodeOptions{Stateless: true}), Protobuf), Options{})
	if len(res.Events) != len(events) {
		t.Fatalf("%d events of %d", len(res.Events), len(events))
	}
	byID := map[string]audit.Event{}
	for _, e := range res.Events {
		byID[e.ID] = e
	}
	traceOf := map[string]string{} // simulated session → session that came back
	sessionOf := map[string]string{}
	for i := range events {
		w := events[i]
		sp := Span(&w, EncodeOptions{Stateless: true})
		for _, kv := range sp.Attributes {
			if kv.Key == attrSession {
				t.Fatalf("a stateless span carries %s", attrSession)
			}
		}
		g := byID["otlp:"+hexOf(sp.TraceId)+":"+hexOf(sp.SpanId)]
		trace := g.Attrs[audit.AttrTraceID]
		if g.Session != "" || len(trace) != 32 {
			t.Fatalf("event %s: session %q, trace %q", w.ID, g.Session, trace)
		}
		if prev, ok := traceOf[w.Session]; ok && prev != trace {
			t.Fatalf("session %s came back as %s and %s", w.Session, prev, trace)
		}
		if prev, ok := sessionOf[trace]; ok && prev != w.Session {
			t.Fatalf("sessions %s and %s came back as one, %s", prev, w.Session, trace)
		}
		traceOf[w.Session], sessionOf[trace] = trace, w.Session
	}
}
