package otlp_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/simulate"
)

// request is one export request of 512 simulated tool calls (a collector
// line), as OTLP/JSON and as protobuf.
func request(b *testing.B) (js, pb []byte) {
	b.Helper()
	var events []audit.Event
	_, err := simulate.Generate(context.Background(), simulate.Options{Seed: 1, Count: 512, Now: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		func(e audit.Event) error {
			events = append(events, e)
			return nil
		})
	if err != nil {
		b.Fatal(err)
	}
	req := otlp.TracesRequest(events, otlp.EncodeOptions{})
	if js, err = otlp.MarshalJSON(req); err != nil {
		b.Fatal(err)
	}
	if pb, err = proto.Marshal(req); err != nil {
		b.Fatal(err)
	}
	return js, pb
}

func benchmarkDecode(b *testing.B, data []byte, enc otlp.Encoding) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		res, err := otlp.Decode(data, enc, otlp.Traces, otlp.Options{})
		if err != nil || len(res.Events) != 512 {
			b.Fatalf("%d events: %v", len(res.Events), err)
		}
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodeJSON: an OTLP/JSON request of 512 spans decoded and
// mapped, what `ingest` does per line of a collector's file.
func BenchmarkDecodeJSON(b *testing.B) {
	js, _ := request(b)
	benchmarkDecode(b, js, otlp.JSON)
}

// BenchmarkDecodeProtobuf: the same request as protobuf (the receiver's
// usual encoding), the yardstick of BenchmarkDecodeJSON.
func BenchmarkDecodeProtobuf(b *testing.B) {
	_, pb := request(b)
	benchmarkDecode(b, pb, otlp.Protobuf)
}
