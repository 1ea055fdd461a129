package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// Options selects a scenario and fixes everything the generated traffic
// depends on.
type Options struct {
	Scenario string        // "" = "proxmox"
	Seed     int64         // background traffic varies with it
	Count    int           // exact number of events; 0 = decided by Duration
	Duration time.Duration // span of simulated time ending at Now; 0 = the scenario's default
	Now      time.Time     // traffic ends at Now (required; truncated to the millisecond)
}

// ScenarioInfo names and describes a scenario.
type ScenarioInfo struct {
	Name        string
	Description string
}

// Stats summarises a run.
type Stats struct {
	Events     int
	Sessions   int // sessions with at least one emitted event
	ByDecision map[audit.Decision]int
	From, To   time.Time // first and last event time (zero when no event)
}

// DefaultScenario is the scenario used when Options.Scenario is empty.
const DefaultScenario = "proxmox"

// Scenarios lists the scenarios, sorted by name.
func Scenarios() []ScenarioInfo {
	out := make([]ScenarioInfo, 0, len(scenarios))
	for _, sc := range scenarios {
		out = append(out, ScenarioInfo{Name: sc.name, Description: sc.description})
	}
	slices.SortFunc(out, func(a, b ScenarioInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func lookup(name string) (*scenario, error) {
	if name == "" {
		name = DefaultScenario
	}
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, nil
		}
	}
	names := make([]string, 0, len(scenarios))
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	return nil, fmt.Errorf("simulate: unknown scenario %q (available: %s)", name, strings.Join(names, ", "))
}

// Generate streams the scenario's events to emit in non-decreasing time
// order, all within [Now-Duration, Now] on whole milliseconds (Duration 0 is
// the scenario's default span). Without Count it emits the scenario's natural
// volume for the span. With Count it emits exactly Count events: the session
// arrival rate (and the number of incidents) is scaled so that they fill the
// span up to Now. A Count smaller than a few long sessions (a dashboard
// session alone holds hundreds of calls) ends early in the span instead.
// Generate stops at the first error from emit or when ctx is done, returning
// what it emitted so far in Stats.
func Generate(ctx context.Context, opts Options, emit func(audit.Event) error) (Stats, error) {
	sc, err := lookup(opts.Scenario)
	if err != nil {
		return Stats{}, err
	}
	switch {
	case opts.Now.IsZero():
		return Stats{}, errors.New("simulate: Options.Now is required (traffic ends at Now)")
	case opts.Count < 0:
		return Stats{}, fmt.Errorf("simulate: Options.Count must not be negative, got %d", opts.Count)
	case opts.Duration < 0:
		return Stats{}, fmt.Errorf("simulate: Options.Duration must not be negative, got %s", opts.Duration)
	case emit == nil:
		return Stats{}, errors.New("simulate: emit callback is nil")
	}
	g, err := newGen(sc, opts)
	if err != nil {
		return Stats{}, err
	}
	return g.run(ctx, emit)
}

// gen is one run of a scenario.
type gen struct {
	sc         *scenario
	r          *rng
	w          *world
	args       *argCache
	known      map[string]bool
	rateReason string
	start, end int64 // window, Unix ms, inclusive
	target     int   // exact number of events; 0 = natural volume
	committed  int   // events planned so far (all inside the window)
	incidents  []*incidentSource

	heap []*entry
	ord  uint64
	free []*session

	idBuf []byte
	idPfx string
	lats  []float64 // slabs the emitted events' pointers point into
	codes []int64
}

// entry is a heap element: a session's next call or a source's next firing.
type entry struct {
	at  int64
	ord uint64 // creation order: ties in time break deterministically
	s   *session
	src source
}

// source starts sessions; fire returns when it fires next, if ever.
type source interface {
	fire(g *gen, at int64) (next int64, more bool)
}

func newGen(sc *scenario, opts Options) (*gen, error) {
	known, err := catalogTools()
	if err != nil {
		return nil, err
	}
	span := opts.Duration
	if span == 0 {
		span = sc.span
	}
	// Whole milliseconds inside [Now-Duration, Now].
	nowNS := opts.Now.UnixNano()
	end := floorDiv(nowNS, int64(time.Millisecond))
	start := -floorDiv(-(nowNS - int64(span)), int64(time.Millisecond))
	g := &gen{
		sc:     sc,
		r:      newRNG(opts.Seed, 1),
		w:      sc.world(),
		args:   newArgCache(),
		known:  known,
		start:  start,
		end:    end,
		target: opts.Count,
		idPfx:  "sim-" + strconv.FormatInt(opts.Seed, 10) + "-",
	}
	if p := sc.policy; p.perMinute > 0 {
		g.rateReason = p.rateReason()
	}
	if g.target > 0 {
		sc.calibrate()
	}
	g.setupSources(span)
	return g, nil
}

// setupSources schedules the regular arrivals, the incidents and the planted
// sessions.
func (g *gen) setupSources(span time.Duration) {
	sc := g.sc
	weeks := span.Hours() / hoursPerWeek
	// In Count mode incidents scale with the traffic, so that the mix keeps
	// its shape whatever the volume.
	scale := 1.0
	if g.target > 0 {
		natural := sc.eventRate.at(g.end) - sc.eventRate.at(g.start)
		for _, k := range sc.incidents {
			natural += float64(k.perWeek * weeks * k.meanLen)
		}
		if natural > 0 {
			scale = float64(g.target) / natural
		}
	}
	for _, k := range sc.incidents {
		x := k.perWeek * weeks * scale
		n := int(x)
		if g.r.chance(x - float64(n)) {
			n++
		}
		if n == 0 {
			continue
		}
		in := k.intensity()
		src := &incidentSource{k: k, in: in, n: n, x0: in.at(g.start), x1: in.at(g.end)}
		g.incidents = append(g.incidents, src)
		g.push(&entry{at: src.time(g), src: src})
	}
	if len(sc.kinds) > 0 {
		a := &arrivals{x: sc.sessionRate.at(g.start)}
		if next, ok := a.next(g, g.start); ok {
			g.push(&entry{at: next, src: a})
		}
	}
	if sc.plants != nil {
		ps := &plantSource{}
		for _, pl := range sc.plants() {
			at := g.end - pl.ago.Milliseconds()
			if at >= g.start && at <= g.end {
				ps.plants = append(ps.plants, pl)
			}
		}
		slices.SortStableFunc(ps.plants, func(a, b plant) int { return int(b.ago - a.ago) })
		if len(ps.plants) > 0 {
			g.push(&entry{at: g.end - ps.plants[0].ago.Milliseconds(), src: ps})
		}
	}
}

// startSession plans a session starting at at and queues it.
func (g *gen) startSession(at int64, plan func(*planner), r *rng, id string) {
	var s *session
	if n := len(g.free); n > 0 {
		s, g.free = g.free[n-1], g.free[:n-1]
	} else {
		s = &session{}
	}
	if id == "" {
		id = uuid(r)
	}
	s.id = id
	p := planner{g: g, r: r, s: s, t: at, end: g.end, lastStart: at, minute: math.MinInt64}
	plan(&p)
	if len(s.calls) == 0 {
		g.recycle(s)
		return
	}
	g.committed += len(s.calls)
	g.push(&entry{at: s.calls[0].at, s: s})
}

func (g *gen) recycle(s *session) {
	*s = session{calls: s.calls[:0]}
	g.free = append(g.free, s)
}

// run drains the heap, emitting calls in time order.
func (g *gen) run(ctx context.Context, emit func(audit.Event) error) (Stats, error) {
	st := Stats{ByDecision: make(map[audit.Decision]int, len(audit.Decisions))}
	for len(g.heap) > 0 {
		if g.target > 0 && st.Events == g.target {
			break
		}
		e := g.heap[0]
		if e.s == nil {
			if next, more := e.src.fire(g, e.at); more {
				e.at = next
				g.down(0)
			} else {
				g.pop()
			}
			continue
		}
		s := e.s
		if s.next == 0 {
			st.Sessions++
		}
		ev := g.event(s, st.Events+1)
		if st.Events == 0 {
			st.From = ev.TS
		}
		st.To = ev.TS
		st.Events++
		st.ByDecision[ev.Decision]++
		if err := emit(ev); err != nil {
			return st, fmt.Errorf("simulate: emit event %s: %w", ev.ID, err)
		}
		if st.Events%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("simulate: stopped after %d events: %w", st.Events, err)
			}
		}
		if s.next++; s.next < len(s.calls) {
			e.at = s.calls[s.next].at
			g.down(0)
		} else {
			g.pop()
			g.recycle(s)
		}
	}
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("simulate: stopped after %d events: %w", st.Events, err)
	}
	return st, nil
}

// event builds the audit event for a session's next call.
func (g *gen) event(s *session, n int) audit.Event {
	c := &s.calls[s.next]
	g.idBuf = strconv.AppendInt(append(g.idBuf[:0], g.idPfx...), int64(n), 10)
	ev := audit.Event{
		ID:            string(g.idBuf),
		TS:            time.UnixMilli(c.at).UTC(),
		Server:        server,
		Tool:          c.tool,
		Method:        audit.DefaultMethod,
		Decision:      c.decision,
		Status:        c.status,
		Gateway:       s.gateway,
		Grant:         s.grant,
		Agent:         s.agent,
		Session:       s.id,
		RequestID:     strconv.Itoa(s.next + 2), // ids 0 and 1 went to initialize and tools/list
		Rule:          c.rule,
		Reason:        c.reason,
		ArgsHash:      c.args.hash,
		ArgKeys:       c.args.keys,
		Args:          c.args.json,
		PolicyVersion: g.sc.policy.version,
	}
	// Pointers go into append-only slabs: planned calls are recycled, and an
	// event the caller keeps must not change under it.
	if c.latency >= 0 {
		if len(g.lats) == cap(g.lats) {
			g.lats = make([]float64, 0, 1024)
		}
		g.lats = append(g.lats, c.latency)
		ev.LatencyMS = &g.lats[len(g.lats)-1]
	}
	if c.errCode != 0 {
		if len(g.codes) == cap(g.codes) {
			g.codes = make([]int64, 0, 256)
		}
		g.codes = append(g.codes, c.errCode)
		ev.ErrorCode = &g.codes[len(g.codes)-1]
	}
	return ev
}

// The heap: a binary min-heap on (at, ord), written out rather than through
// container/heap to avoid interface calls on the hot path.

func (g *gen) less(i, j int) bool {
	a, b := g.heap[i], g.heap[j]
	return a.at < b.at || (a.at == b.at && a.ord < b.ord)
}

func (g *gen) push(e *entry) {
	g.ord++
	e.ord = g.ord
	g.heap = append(g.heap, e)
	for i := len(g.heap) - 1; i > 0; {
		parent := (i - 1) / 2
		if !g.less(i, parent) {
			break
		}
		g.heap[i], g.heap[parent] = g.heap[parent], g.heap[i]
		i = parent
	}
}

func (g *gen) pop() {
	n := len(g.heap) - 1
	g.heap[0] = g.heap[n]
	g.heap[n] = nil
	g.heap = g.heap[:n]
	if n > 0 {
		g.down(0)
	}
}

func (g *gen) down(i int) {
	n := len(g.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && g.less(r, l) {
			m = r
		}
		if !g.less(m, i) {
			return
		}
		g.heap[i], g.heap[m] = g.heap[m], g.heap[i]
		i = m
	}
}
