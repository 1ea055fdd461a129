package alarm_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/alarm"
)

// BenchmarkAlarmDelay measures the alarm's delay as serve runs it (each
// stored batch wakes it; the default flush interval and alerts.interval):
// 100 runaway loops poll through JetStream at once, and each alert's
// arrival on mcptrail.alerts.<server> is timed from the publishing of the
// poll that crossed the threshold. One iteration is one round of 100 loops:
//
//	go test ./alarm -run '^$' -bench AlarmDelay -benchtime 1x
func BenchmarkAlarmDelay(b *testing.B) {
	const loops, threshold = 100, 5
	cfg := liveConfig()
	cfg.Interval, cfg.RunawayPolls = alarm.DefaultInterval, threshold
	var all []time.Duration
	for round := range b.N {
		e := newEnv(b, cfg)
		e.opts.BatchSize, e.opts.FlushInterval = 0, 0 // serve's defaults
		d := e.start()
		var got collector
		sub := got.subscribe(b, e.opts.EmbeddedListen)
		gw := newGateway(b, e.opts.EmbeddedListen)
		crossed := make([]time.Time, loops)
		var wg sync.WaitGroup
		for i := range loops {
			session := fmt.Sprintf("r%d-loop%d", round, i)
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond) // loops out of step
				if err := gw.call(session, "vm_agent_exec", i, false); err != nil {
					b.Error(err)
					return
				}
				for n := 1; n <= threshold+40 && got.count(session, alarm.KindRunawayLoop, alarm.StateRunning) == 0; n++ {
					time.Sleep(250 * time.Millisecond)
					if n == threshold+1 {
						crossed[i] = time.Now()
					}
					if err := gw.call(session, "vm_agent_exec_status", i, false); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		for i := range loops {
			at := got.arrival(fmt.Sprintf("r%d-loop%d", round, i), alarm.StateRunning)
			require.False(b, at.IsZero(), "loop %d not alerted", i)
			all = append(all, at.Sub(crossed[i]))
		}
		sub.Close()
		d.stop()
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Milliseconds()) }
	b.ReportMetric(q(0.5), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(float64(all[len(all)-1].Milliseconds()), "max_ms")
}
