package simulate

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// TestStreamingUsesConstantMemory: the live heap after 50k events and after
// 400k events is the same, give or take the active sessions.
func TestStreamingUsesConstantMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 400k events")
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var early, late uint64
	n := 0
	_, err := Generate(context.Background(), Options{Seed: 1, Count: 400000, Now: testNow}, func(audit.Event) error {
		switch n++; n {
		case 50000:
			early = heap()
		case 400000:
			late = heap()
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, early)
	grown := int64(late) - int64(early)
	t.Logf("live heap after 50k events: %d KiB, after 400k: %d KiB", early>>10, late>>10)
	assert.Less(t, grown, int64(4<<20), "the heap grows with the events")
}

var update = flag.Bool("update", false, "rewrite the golden files")

// TestSmallGolden pins the "small" scenario byte for byte: other packages'
// golden files are built from it, so a change here must be deliberate
// (go test ./simulate -run Golden -update).
func TestSmallGolden(t *testing.T) {
	const path = "testdata/small-seed1.jsonl"
	var buf []byte
	_, err := Generate(context.Background(), Options{Scenario: "small", Seed: 1, Now: testNow}, func(e audit.Event) error {
		b, err := json.Marshal(e)
		buf = append(append(buf, b...), '\n')
		return err
	})
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, buf, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(buf), "small scenario changed; rerun with -update if intended")
}

func BenchmarkGenerate(b *testing.B) {
	for _, bc := range []struct {
		scenario string
		count    int
	}{{"proxmox", 1_000_000}, {"loops", 1_000_000}} {
		b.Run(fmt.Sprintf("%s-%d", bc.scenario, bc.count), func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			for i := 0; i < b.N; i++ {
				_, err := Generate(context.Background(), Options{Scenario: bc.scenario, Seed: int64(i), Count: bc.count, Now: testNow},
					func(audit.Event) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			events := float64(b.N * bc.count)
			b.ReportMetric(events/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/events, "allocs/event")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/events, "B/event")
		})
	}
}

// BenchmarkGenerateJSONL includes encoding, as `mcptrail simulate --out` does.
func BenchmarkGenerateJSONL(b *testing.B) {
	w := bufio.NewWriter(nopWriter{})
	enc := json.NewEncoder(w)
	b.ResetTimer()
	_, err := Generate(context.Background(), Options{Seed: 1, Count: b.N, Now: testNow}, func(e audit.Event) error { return enc.Encode(e) })
	if err != nil {
		b.Fatal(err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
