package analytics

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// The runs of a batch are found in Go, from the staged columns, for every
// session whose new calls come after its stored ones and share no
// millisecond with each other: then the batch's calls follow the session's
// stored sequence, and sorting them by time, tool and arguments is
// DuckDB's order. The stored last call is the one before them; when the
// first new call continues it, the run it ends (the calls since the
// session's last cut) is read again and extended. Sorting in Go runs beside
// DuckDB's insert of the batch, where sorting the batch in DuckDB cost a
// quarter of the ingest rate. Every other session goes through recordRuns'
// SQL, which the tests hold the Go path to.

// runSession is a session's key: its server, grant and session key.
type runSession struct{ server, grant, key string }

// pk is the session's key in run_tails: hash(server, g, sk), as the SQL
// path's sessionHash.
func (s runSession) pk() uint64 { return duckhash.Strings(s.server, s.grant, s.key) }

// runCall is one call of a tool in a staged batch. It holds no pointers:
// its tool and arguments are indexes (batchCalls.tools, argsRef), so that
// the garbage collector, which at ingest's target runs several times a
// batch, neither scans a batch's calls nor runs write barriers while they
// are sorted. With its tool and arguments as strings, and a session found
// by hashing three strings a call instead of one, collectCalls took 54 ms
// a batch of 122,880 calls instead of 41 (BenchmarkCollectCalls).
type runCall struct {
	session int32 // index in batchCalls.sessions
	tool    int32 // index in batchCalls.tools
	ms, us  int64 // epoch milliseconds (truncated, as DuckDB's epoch_ms) and microseconds
	args    argsRef
	err     bool
	allowed bool // the gateway allowed it (for tool_day_use's sets)
	// argsAsBefore: the call before it in its session is of the same
	// tool with the same arguments (sameArgs), found by collectCalls
	// while that call's arguments were still in the cache; only for the
	// sessions whose calls it did not sort (batchCalls.resorted).
	argsAsBefore bool
	day          int32 // its tool day's index in collectCalls' list of them
}

// argsRef is where a call's arguments (their hash, args_hash) are: at or
// above 0 the staged row chunk<<32 | row; noArgs for a call without;
// below that, -2-i for batchCalls.storedArgs[i] (a stored call's).
type argsRef int64

const noArgs argsRef = -1

// Positions in stagingSchema of the staged strings collectCalls reads.
const (
	colServer, colTool, colDecision, colStatus, colGateway, colGrant, colAgent, colSession, colArgsHash = 2, 3, 5, 6, 7, 8, 9, 10, 16
)

// batchCalls is a staged batch's calls of tools, sorted by session, time,
// tool and arguments; starts[i] is session i's first call. runs, tails and
// tied are findRuns': runs[runStarts[i]:runStarts[i+1]] are session i's.
type batchCalls struct {
	sessions  []runSession
	calls     []runCall
	starts    []int
	runs      []fastRun
	gaps      []int64 // the runs' gaps, each run's a slice of it
	runStarts []int
	tails     []runTail
	tied      []bool
	// resorted marks the sessions whose calls collectCalls sorted: their
	// calls' argsAsBefore do not hold.
	resorted []bool
	// days are the batch's tool days: their tool_day_use rows.
	days map[toolDayKey]*DayUse
	// cols are the staged columns the calls' arguments are read from;
	// tools the calls' tools, each once (toolIDs finds them); storedArgs
	// the arguments of stored calls read back (openRunCalls).
	cols       *columns
	tools      []string
	toolIDs    map[string]int32
	storedArgs []string
}

// toolID is the index of the tool name in b.tools, added there if new.
func (b *batchCalls) toolID(name string) int32 {
	id, ok := b.toolIDs[name]
	if !ok {
		id = int32(len(b.tools))
		b.toolIDs[name] = id
		b.tools = append(b.tools, name)
	}
	return id
}

// argsOf is the arguments r refers to, "" for noArgs.
func (b *batchCalls) argsOf(r argsRef) string {
	switch {
	case r >= 0:
		return b.cols.chunks[r>>32].strs[colArgsHash].value(int(uint32(r)))
	case r == noArgs:
		return ""
	}
	return b.storedArgs[-2-r]
}

// storedArgsRef keeps a stored call's arguments ("" for none) and refers
// to them.
func (b *batchCalls) storedArgsRef(args string) argsRef {
	if args == "" {
		return noArgs
	}
	b.storedArgs = append(b.storedArgs, args)
	return argsRef(-1 - len(b.storedArgs))
}

// sessionKeyHash hashes a session's key for collectCalls' table (a
// variable so that a test can make every key collide).
var sessionKeyHash = func(key string) uint64 { return maphash.String(idSeed, key) }

// sessionSGMix spreads a session's server and grant over its key's hash
// (an odd constant: the golden ratio's).
const sessionSGMix = 0x9E3779B97F4A7C15

// dayKey is a tool day's key while a batch is collected: its server and
// grant (an index in the batch's), tool and day, without strings to hash.
type dayKey struct {
	serverGrant, tool int32
	day               int64
}

// callScratch is the memory collectCalls lays a batch's calls and runs out
// in, which the store keeps from batch to batch (guarded by its mu, as the
// batch is): ~7 MB a batch of ingest's size that Go would otherwise
// allocate, zero and collect every batch, touching fresh pages. The
// batchCalls built in it lives until the next collectCalls with the same
// scratch.
type callScratch struct {
	of, toolOf, dayOf []int32
	calls             []runCall
	runs              []fastRun
	gaps              []int64
}

// release takes back b's gaps (grown by the runs of the sessions that
// continue across the batch's start, after collectCalls) and drops what
// its runs point to (the staged columns' strings), so that a store between
// batches holds none of them. b was collected in x.
func (x *callScratch) release(b *batchCalls) {
	x.gaps = b.gaps
	clear(x.runs)
}

// collectCalls gathers the staged calls of tools, sorts them and finds
// their runs (findRuns), and counts their tool days and tool day use, in
// x's memory (nil: fresh memory).
func collectCalls(c *columns, x *callScratch) *batchCalls {
	if x == nil {
		x = new(callScratch)
	}
	b := &batchCalls{cols: c, toolIDs: map[string]int32{}}
	// Sessions are found by their server and grant's index in
	// serverGrants and their key: one string to hash a call, not three,
	// in a flat table of hashes (idSet; a Go map keyed by both cost twice
	// as much, BenchmarkCollectCalls). The rare key whose hash an earlier
	// session took is found in collided, exactly.
	type sessionIndexKey struct {
		serverGrant int32
		key         string
	}
	index := newIDSet(1 << 13) // not the staging's pool: its sets are a batch's ids large
	var collided map[sessionIndexKey]int32
	var serverGrants []clusterKey
	sgIDs := map[clusterKey]int32{}
	sg := int32(-1) // the previous call's server and grant, which most calls share
	sessionSG := []int32{}
	days := map[dayKey]int32{} // index in dayList
	// Each tool's last tool day: a tool's next call is mostly of the same
	// server, grant and day (the staged chunks are of one server and
	// grant), which spares days its lookup.
	type lastDay struct {
		key dayKey
		at  int32 // in dayList
	}
	var lastDays []lastDay
	var dayList []*DayUse // a tool day's row found with it: one map lookup a call
	// First each call's session (-1: no tool) and tool, then each call in
	// its session's place: one copy of the calls, not two.
	of, toolOf, dayOf := x.of[:0], x.toolOf[:0], x.dayOf[:0]
	var counts []int
	prevName, prevTool := "", int32(-1)
	for _, ch := range c.chunks {
		s := &ch.strs
		for j := range ch.n {
			name := s[colTool].value(j)
			if name == "" {
				of, toolOf, dayOf = append(of, -1), append(toolOf, -1), append(dayOf, -1)
				continue
			}
			if k := (clusterKey{server: s[colServer].value(j), grant: s[colGrant].value(j)}); sg < 0 || serverGrants[sg] != k {
				var ok bool
				if sg, ok = sgIDs[k]; !ok {
					sg = int32(len(serverGrants))
					sgIDs[k] = sg
					serverGrants = append(serverGrants, k)
				}
			}
			key := ch.sessionKey(j)
			next := int32(len(b.sessions))
			i, found := index.lookupOrAdd(sessionKeyHash(key)^sessionSGMix*uint64(sg+1), next)
			if found && (sessionSG[i] != sg || b.sessions[i].key != key) {
				if collided == nil {
					collided = map[sessionIndexKey]int32{}
				}
				sk := sessionIndexKey{serverGrant: sg, key: key}
				if i, found = collided[sk]; !found {
					i = next
					collided[sk] = i
				}
			}
			if !found {
				i = next
				// The key copied out of the staged column: the upkeep
				// reads it thrice more (the sessions', runs' and tails'
				// records), each a cache miss in the batch's ~70 MB.
				b.sessions = append(b.sessions, runSession{server: serverGrants[sg].server, grant: serverGrants[sg].grant, key: strings.Clone(key)})
				sessionSG = append(sessionSG, sg)
				counts = append(counts, 0)
			}
			counts[i]++
			// A call's tool is often the one before's in its chunk: a
			// comparison of bytes already read spares the map's hashing.
			if name != prevName {
				prevName, prevTool = name, b.toolID(name)
			}
			tool := prevTool
			of, toolOf = append(of, i), append(toolOf, tool)
			dk := dayKey{serverGrant: sg, tool: tool, day: ch.ts[j] / 1000 / dayMillis}
			if int(tool) == len(lastDays) {
				lastDays = append(lastDays, lastDay{at: -1})
			}
			last := &lastDays[tool]
			if last.at < 0 || last.key != dk {
				at, ok := days[dk]
				if !ok {
					at = int32(len(dayList))
					dayList = append(dayList, &DayUse{})
					days[dk] = at
				}
				*last = lastDay{key: dk, at: at}
			}
			dayOf = append(dayOf, last.at)
			d := dayList[last.at]
			decision := s[colDecision].value(j)
			d.times.call(ch.ts[j], decision == "allowed")
			d.add(countCall(decision, s[colSession].value(j) != "", s[colAgent].value(j) != "", ch.ts[j]))
		}
	}
	x.of, x.toolOf, x.dayOf = of, toolOf, dayOf
	b.starts = make([]int, len(b.sessions)+1)
	for i, n := range counts {
		b.starts[i+1] = b.starts[i] + n
	}
	// Every call is written below: the scratch needs no zeroing.
	n := b.starts[len(b.sessions)]
	x.calls = slices.Grow(x.calls[:0], n)
	b.calls = x.calls[:n]
	next := slices.Clone(b.starts[:len(b.sessions)])
	b.resorted = make([]bool, len(b.sessions))
	k := 0
	for ci, ch := range c.chunks {
		s := &ch.strs
		for j := range ch.n {
			i := of[k]
			tool := toolOf[k]
			k++
			if i < 0 {
				continue
			}
			args := noArgs
			if s[colArgsHash].value(j) != "" {
				args = argsRef(ci)<<32 | argsRef(j)
			}
			us := ch.ts[j]
			at := next[i]
			c := runCall{session: i, ms: us / 1000, us: us, tool: tool, args: args, err: s[colStatus].value(j) == "error",
				allowed: s[colDecision].value(j) == "allowed", day: dayOf[k-1]}
			if at > b.starts[i] {
				// The session's call before, mostly a few rows back, its
				// arguments still in the cache (findRuns would read both
				// from anywhere in the batch).
				switch p := &b.calls[at-1]; {
				case p.ms >= c.ms:
					b.resorted[i] = true
				case p.tool == c.tool:
					c.argsAsBefore = b.sameArgs(c.args, p.args)
				}
			}
			b.calls[at] = c
			next[i]++
		}
	}
	// Each session's calls come mostly in time order already: a session
	// whose milliseconds only rise is in compareCalls' order as it is.
	for i := range b.sessions {
		if b.resorted[i] {
			slices.SortFunc(b.calls[b.starts[i]:b.starts[i+1]], b.compareCalls)
		}
	}
	b.addSessionSets(dayList)
	b.days = make(map[toolDayKey]*DayUse, len(days))
	for dk, at := range days {
		sg := serverGrants[dk.serverGrant]
		b.days[toolDayKey{server: sg.server, grant: sg.grant, tool: b.tools[dk.tool], day: dk.day}] = dayList[at]
	}
	b.runs, b.gaps = x.runs[:0], x.gaps[:0]
	b.findRuns()
	x.runs, x.gaps = b.runs, b.gaps
	return b
}

// addSessionSets adds each session to the sets of the tools and days of
// its calls (dayList's rows, by each call's day): once per session, tool
// and day, not per call.
func (b *batchCalls) addSessionSets(dayList []*DayUse) {
	type usedOn struct {
		day     int32
		allowed bool // the session's calls of the tool that day hold an allowed one
	}
	var seen []usedOn
	for i, rs := range b.sessions {
		if rs.key == "" {
			continue
		}
		seen = seen[:0]
	calls:
		for _, c := range b.calls[b.starts[i]:b.starts[i+1]] {
			for k := range seen {
				if seen[k].day == c.day {
					seen[k].allowed = seen[k].allowed || c.allowed
					continue calls
				}
			}
			seen = append(seen, usedOn{day: c.day, allowed: c.allowed})
		}
		h := SessionHash(rs.key)
		for _, s := range seen {
			u := dayList[s.day]
			u.Sessions = append(u.Sessions, h)
			if s.allowed {
				u.AllowedSessions = append(u.AllowedSessions, h)
			}
		}
	}
}

// compareCalls orders calls by session, time, tool and arguments.
func (b *batchCalls) compareCalls(x, y runCall) int {
	if c := cmp.Compare(x.session, y.session); c != 0 {
		return c
	}
	if c := cmp.Compare(x.ms, y.ms); c != 0 {
		return c
	}
	if x.tool != y.tool {
		return cmp.Compare(b.tools[x.tool], b.tools[y.tool])
	}
	if x.args != y.args {
		if c := cmp.Compare(b.argsOf(x.args), b.argsOf(y.args)); c != 0 {
			return c
		}
	}
	return cmp.Compare(x.us, y.us)
}

// sameArgs says whether two calls have the same arguments, both some.
func (b *batchCalls) sameArgs(x, y argsRef) bool {
	return x != noArgs && y != noArgs && (x == y || b.argsOf(x) == b.argsOf(y))
}

// storedTail is what run_tails says of a session the batch touches.
type storedTail struct {
	lastMS, lastUS int64
	lastTH, lastHH uint64
	continues      bool // the batch's first call continues the stored last call
	bMS, aUS       int64
	aTH            uint64
	aSet           bool
}

// runTail is a session's new run_tails row, from the Go path.
type runTail struct {
	bMS          int64
	aUS          int64 // the call before the cut; aSet false: none
	aSet         bool
	aTool        string // "" when the call before is the stored last call: aTH
	aTH          uint64
	lastUS       int64
	lastTool     string
	lastArgs     string
	sessionIndex int32
	atStart      bool // the cut is at the batch's first call: a is the stored last call
}

// fastRun is a run found in Go.
type fastRun struct {
	session      int32
	tool, args   string
	prevTool     string // "" when the call before is the stored last call (prevTH) or none (prevSet false)
	prevTH       uint64
	prevUS       int64
	prevSet      bool
	gaps         []int64
	errors       int64
	lastErr      bool
	t0, t1       int64
	first, lastU int64
	atStart      bool // starts at the batch's first call: prev is the stored last call
}

// recordBatchRuns brings the runs up to date with a batch just inserted
// (its calls those of b, every staged call stored): the sessions the Go
// path can take from b, the others by recordRuns over the calls that
// where selects. keys learns every session of the batch: each now has a
// tail.
func recordBatchRuns(v *arrowViews, keys *tailKeys, b *batchCalls, where string, args ...any) error {
	ctx := v.ctx
	tails, pks, err := lookupTails(ctx, v, keys, b)
	if err != nil {
		return err
	}
	defer func() {
		for _, pk := range pks {
			keys.add(pk)
		}
	}()
	runs := make([]fastRun, 0, len(b.runs))
	newTails := make([]runTail, 0, len(b.sessions))
	var slow, continuing, extended []int32
	for si := range b.sessions {
		calls := b.calls[b.starts[si]:b.starts[si+1]]
		tail, stored := tails[int32(si)]
		switch {
		case stored && calls[0].ms <= tail.lastMS || b.tied[si]:
			slow = append(slow, int32(si))
			continue
		case stored && tail.continues:
			continuing = append(continuing, int32(si))
			continue
		}
		// The stored last call, if any, is the one before the batch's
		// first: the start of a run from there, or of the cut there.
		for _, r := range b.runs[b.runStarts[si]:b.runStarts[si+1]] {
			if r.atStart && stored {
				r.prevTH, r.prevUS, r.prevSet = tail.lastTH, tail.lastUS, true
			}
			runs = append(runs, r)
		}
		t := b.tails[si]
		if t.atStart && stored {
			t.aUS, t.aTH, t.aSet = tail.lastUS, tail.lastTH, true
		}
		newTails = append(newTails, t)
	}
	if len(continuing) > 0 {
		// The stored run these sessions' first calls continue is read
		// again: the calls since its session's last cut.
		open, err := openRunCalls(ctx, v, b, continuing, tails, where, args...)
		if err != nil {
			return err
		}
		for _, si := range continuing {
			tail := tails[si]
			calls := append(open[si], b.calls[b.starts[si]:b.starts[si+1]]...)
			var t runTail
			var tied bool
			before := len(runs)
			runs, t, tied = b.sessionRuns(runs, si, calls, callBefore{set: tail.aSet, th: tail.aTH, us: tail.aUS}, false)
			if tied || len(open[si]) == 0 || open[si][0].ms != tail.bMS {
				runs = runs[:before]
				slow = append(slow, si)
				continue
			}
			newTails = append(newTails, t)
			extended = append(extended, si)
		}
		if err := dropOpenRuns(ctx, v, b, extended, tails); err != nil {
			return err
		}
	}
	if err := storeFastRuns(ctx, v, b, runs, newTails, tails, pks); err != nil {
		return err
	}
	if len(slow) == 0 {
		return nil
	}
	return recordSlowRuns(ctx, v, b, slow, pks, where, args...)
}

// findRuns finds each session's runs among its calls in the batch, and its
// new tail, as if it had no stored call: recordBatchRuns then gives the
// runs and the cut at its first call the stored last call as the call
// before. tied marks the sessions with two calls in one millisecond: DuckDB
// orders them by its hashes of tool and arguments, which Go does not know.
func (b *batchCalls) findRuns() {
	b.tails = make([]runTail, len(b.sessions))
	b.tied = make([]bool, len(b.sessions))
	b.runStarts = make([]int, len(b.sessions)+1)
	for si := range b.sessions {
		b.runStarts[si] = len(b.runs)
		b.runs, b.tails[si], b.tied[si] = b.sessionRuns(b.runs, int32(si), b.calls[b.starts[si]:b.starts[si+1]], callBefore{}, !b.resorted[si])
	}
	b.runStarts[len(b.sessions)] = len(b.runs)
}

// callBefore is the stored call before a sequence of calls, if any: its
// tool's hash and its time.
type callBefore struct {
	set bool
	th  uint64
	us  int64
}

// sessionRuns appends to runs the runs of one session's calls (sorted,
// before them the call before), and returns the session's new tail and
// whether two of its calls share a millisecond (then the result is not
// DuckDB's: the caller takes the SQL path). With marked, the calls' own
// argsAsBefore tell whether each has its call before's arguments.
func (b *batchCalls) sessionRuns(runs []fastRun, si int32, calls []runCall, before callBefore, marked bool) ([]fastRun, runTail, bool) {
	gap := RunsMaxGap.Milliseconds()
	t := runTail{sessionIndex: si}
	tied := false
	// The open run, if opened; its gaps are the tail of b.gaps from
	// gaps0 on (one arena a batch, not a slice a run).
	var open fastRun
	opened, gaps0 := false, 0
	closeRun := func() {
		open.gaps = b.gaps[gaps0:len(b.gaps):len(b.gaps)]
		runs = append(runs, open)
		opened = false
	}
	for i, c := range calls {
		if i > 0 && c.ms == calls[i-1].ms {
			tied = true
		}
		cont := i > 0 && c.tool == calls[i-1].tool && c.ms-calls[i-1].ms <= gap &&
			(marked && c.argsAsBefore || !marked && b.sameArgs(c.args, calls[i-1].args))
		if cont {
			if !opened {
				p := calls[i-1]
				opened, gaps0 = true, len(b.gaps)
				open = fastRun{session: si, tool: b.tools[p.tool], args: b.argsOf(p.args), t0: p.ms, first: p.us, errors: b2i(p.err), atStart: i == 1}
				switch {
				case i > 1:
					open.prevTool, open.prevUS, open.prevSet = b.tools[calls[i-2].tool], calls[i-2].us, true
				case before.set:
					open.prevTH, open.prevUS, open.prevSet = before.th, before.us, true
				}
			}
			b.gaps = append(b.gaps, c.ms-calls[i-1].ms)
			open.errors += b2i(c.err)
			open.lastErr, open.t1, open.lastU = c.err, c.ms, c.us
			continue
		}
		if opened {
			closeRun()
		}
		// Not continuing the call before, a millisecond or more later
		// (else the session is tied): a cut.
		t.bMS, t.atStart = c.ms, i == 0
		switch {
		case i > 0:
			t.aUS, t.aTool, t.aSet = calls[i-1].us, b.tools[calls[i-1].tool], true
		case before.set:
			t.aUS, t.aTH, t.aSet = before.us, before.th, true
		}
	}
	if opened {
		closeRun()
	}
	last := calls[len(calls)-1]
	t.lastUS, t.lastTool, t.lastArgs = last.us, b.tools[last.tool], b.argsOf(last.args)
	return runs, t, tied
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
