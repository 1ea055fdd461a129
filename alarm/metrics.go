package alarm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the alarm's series on /metrics. A nil *Metrics counts nothing.
type Metrics struct {
	alerts *prometheus.CounterVec
	open   prometheus.Gauge
	errors prometheus.Counter
	delay  prometheus.Histogram
}

// NewMetrics makes the alarm's metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_alerts_total",
			Help: "Alerts published on mcptrail.alerts.<server>, by kind (runaway_loop, retry_storm) and state (running, ended).",
		}, []string{"kind", "state"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_alerts_open",
			Help: "Runs alerted as running and not yet ended.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_alarm_errors_total",
			Help: "Alarm evaluations that failed (read, record or publish); the next one tries again.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcptrail_alarm_delay_seconds",
			Help:    "From the storing of the call that crossed the threshold to its running alert.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60},
		}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.alerts, m.open, m.errors, m.delay}
}

func (m *Metrics) sent(kind, state string) {
	if m != nil {
		m.alerts.WithLabelValues(kind, state).Inc()
	}
}

func (m *Metrics) setOpen(n int) {
	if m != nil {
		m.open.Set(float64(n))
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.errors.Inc()
	}
}

func (m *Metrics) observeDelay(d time.Duration) {
	if m != nil {
		m.delay.Observe(d.Seconds())
	}
}
