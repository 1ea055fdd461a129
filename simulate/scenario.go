package simulate

import (
	"math"
	"sync"
	"time"
)

// scenario is a named traffic mix.
type scenario struct {
	name        string
	description string
	span        time.Duration // default Duration
	errRate     float64       // share of allowed calls the upstream fails
	policy      *gatewayPolicy
	world       func() *world
	kinds       []*kind        // sessions arriving all the time
	incidents   []*kind        // rare sessions, a set number per week
	plants      func() []plant // fixed sessions at fixed times before Now (ground truth)

	// The arrival intensity of the regular kinds together, in sessions per
	// hour (set by prepare), and in expected events per hour (set by
	// calibrate, for Count mode).
	sessionRate *intensity
	eventRate   *intensity
	calibrated  sync.Once
}

// kind is one kind of session: who runs it, how often, and its script.
type kind struct {
	name    string
	perDay  float64 // regular kinds: sessions per day on average
	perWeek float64 // incidents: sessions per week
	prof    *profile
	plan    func(p *planner)
	meanLen float64 // mean calls per session; set by calibration
}

// intensity is the kind's own arrival profile (for placing incidents).
func (k *kind) intensity() *intensity { return newIntensity(*k.prof) }

// plant is a session of planted ground truth.
type plant struct {
	ago     time.Duration // its first call is at Now-ago
	session string
	seed    uint64 // its own random stream, independent of Options.Seed
	plan    func(p *planner)
}

// plantedSeed seeds the planted sessions' streams: ground truth must not move
// with Options.Seed.
const plantedSeed = 0x10095

// prepare derives the intensities; mean lengths are filled in by calibrate.
func (sc *scenario) prepare() {
	var rate [hoursPerWeek]float64
	for _, k := range sc.kinds {
		for h := range rate {
			rate[h] += float64(k.perDay / 24 * k.prof[h])
		}
	}
	sc.sessionRate = newIntensity(rate)
	sc.eventRate = sc.sessionRate // until calibrated; only Count mode needs it
}

// calibrate measures each kind's mean session length by planning sessions
// with a fixed seed. Count mode needs it to size the arrival rate.
func (sc *scenario) calibrate() {
	sc.calibrated.Do(func() {
		known, err := catalogTools()
		if err != nil {
			return // Generate reports the error before getting here
		}
		g := &gen{sc: sc, r: newRNG(0xca1, 7), w: sc.world(), args: newArgCache(), known: known, end: math.MaxInt64 / 4}
		g.rateReason = sc.policy.rateReason()
		monday10 := int64(4*24+10) * msPerHour // 1970-01-05 10:00 UTC
		for _, k := range append(append([]*kind(nil), sc.kinds...), sc.incidents...) {
			calls, n := 0, 0
			for ; n < 400 && (n < 30 || calls < 20000); n++ {
				s := &session{}
				p := planner{g: g, r: g.r, s: s, t: monday10 + int64(n)*msPerDay*7, end: g.end, minute: math.MinInt64}
				k.plan(&p)
				calls += len(s.calls)
			}
			k.meanLen = float64(calls) / float64(n)
		}
		var rate [hoursPerWeek]float64
		for _, k := range sc.kinds {
			for h := range rate {
				rate[h] += float64(k.perDay / 24 * k.prof[h] * k.meanLen)
			}
		}
		sc.eventRate = newIntensity(rate)
	})
}

// arrivals is the superposed Poisson process of the regular kinds, drawn by
// inversion of the cumulative intensity.
type arrivals struct {
	x float64 // cumulative intensity at the last arrival
}

func (a *arrivals) fire(g *gen, at int64) (int64, bool) {
	how := hourOfWeek(at)
	var w [16]float64
	ks := g.sc.kinds
	for i, k := range ks {
		w[i] = k.perDay * k.prof[how]
	}
	k := ks[g.r.weighted(w[:len(ks)])]
	g.startSession(at, k.plan, g.r, "")
	return a.next(g, at)
}

// next draws the next arrival after at. In Count mode the rate is scaled so
// that the events still needed fit in the rest of the window: the deficit
// over the events the rest of the window would naturally hold. Once enough
// events are planned arrivals stop; while too few are, arrivals that would
// fall past the end are pulled inside it, so the count is always reached.
func (a *arrivals) next(g *gen, at int64) (int64, bool) {
	gain := 1.0
	if g.target > 0 {
		if g.committed >= g.target {
			return 0, false
		}
		need := float64(g.target-g.committed) - g.pendingIncidentEvents()
		if need < 1 {
			need = 1
		}
		if rest := g.sc.eventRate.at(g.end) - g.sc.eventRate.at(at); rest > 0 {
			gain = need / rest
		} else {
			gain = math.Inf(1)
		}
	}
	a.x += g.r.exp() / gain
	t := g.sc.sessionRate.inverse(a.x)
	if t < at {
		t = at
	}
	if t > g.end {
		if g.target == 0 || g.committed >= g.target {
			return 0, false
		}
		t = at + int64(g.r.float()*float64(g.end-at+1))
		a.x = g.sc.sessionRate.at(t)
	}
	return t, true
}

func (g *gen) pendingIncidentEvents() float64 {
	var sum float64
	for _, s := range g.incidents {
		sum += float64(s.n-s.i) * s.k.meanLen
	}
	return sum
}

// incidentSource places a set number of one incident kind over the window,
// one in each equal slice of the kind's cumulative intensity: spread out, yet
// at the hours the kind is active.
type incidentSource struct {
	k      *kind
	in     *intensity
	n, i   int
	x0, x1 float64
}

func (s *incidentSource) time(g *gen) int64 {
	x := s.x0 + float64((float64(s.i)+g.r.float())/float64(s.n)*(s.x1-s.x0))
	return min(max(s.in.inverse(x), g.start), g.end)
}

func (s *incidentSource) fire(g *gen, at int64) (int64, bool) {
	g.startSession(at, s.k.plan, g.r, "")
	if s.i++; s.i >= s.n {
		return 0, false
	}
	return max(s.time(g), at), true
}

// plantSource starts the planted sessions in time order.
type plantSource struct {
	plants []plant
	i      int
}

func (s *plantSource) fire(g *gen, at int64) (int64, bool) {
	pl := s.plants[s.i]
	g.startSession(at, pl.plan, newRNG(plantedSeed, pl.seed), pl.session)
	if s.i++; s.i >= len(s.plants) {
		return 0, false
	}
	return g.end - s.plants[s.i].ago.Milliseconds(), true
}
