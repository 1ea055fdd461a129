package simulate

import (
	"encoding/hex"
	"fmt"
	"math"

	"github.com/mcptrail/mcptrail/audit"
)

// plannedCall is one call of a session, decided and timed when the session
// starts.
type plannedCall struct {
	at       int64 // Unix milliseconds
	tool     string
	args     *argSet
	decision audit.Decision
	status   string // "ok" or "error" for allowed calls, else empty
	rule     string
	reason   string
	errCode  int64   // JSON-RPC error code; 0 = none
	latency  float64 // upstream latency in ms; < 0 = not forwarded
}

// session is a planned MCP session waiting in the heap to be emitted.
type session struct {
	id      string
	agent   string
	grant   string
	gateway string
	calls   []plannedCall
	next    int // index of the next call to emit
}

// gateways are the gateway instances sessions are spread over.
var gateways = []string{"pl-gw-01", "pl-gw-02"}

// result is what an agent learns from a call.
type result struct {
	decision audit.Decision
	ok       bool // allowed and the upstream answered without error
	planned  bool // false once the session has run past the end of the window
}

// planner lays out one session's calls: scripts (the session kinds) drive it
// like an agent would, and it applies the gateway's decision, the upstream's
// latency and errors, and the session rate limit to each call.
type planner struct {
	g         *gen
	r         *rng
	s         *session
	t         int64 // time of the next call, Unix ms
	end       int64 // calls after this are not planned
	lastStart int64 // start of the last call, for polling intervals
	lastTool  string
	lastArgs  *argSet

	minute   int64 // calendar minute of the rate-limit counter
	inMinute int   // calls let through in that minute

	forceErr bool  // the upstream fails every call (retry storms)
	errCode  int64 // error code of forced failures
	noErr    bool  // the upstream never fails (planted loops)
}

// as names the session's identity; scripts call it first.
func (p *planner) as(grant, agent string) {
	p.s.grant, p.s.agent = grant, agent
	p.s.gateway = pick(p.r, gateways)
}

func (p *planner) live() bool { return p.t <= p.end }

func (p *planner) args(kv ...arg) *argSet { return p.g.args.get(kv...) }

// call plans one call at the current time and advances the clock by its
// latency.
func (p *planner) call(tool string, a *argSet) result {
	if p.t > p.end {
		return result{}
	}
	c := plannedCall{at: p.t, tool: tool, args: a, latency: -1}
	spec, known := tools[tool]
	c.decision, c.rule, c.reason = p.g.sc.policy.decide(p.s.grant, tool, known && p.g.known[tool])
	if c.decision == audit.Allowed && p.g.sc.policy.perMinute > 0 {
		if m := floorDiv(p.t, msPerMinute); m != p.minute {
			p.minute, p.inMinute = m, 0
		}
		if p.inMinute >= p.g.sc.policy.perMinute {
			c.decision, c.rule, c.reason = audit.RateLimited, ruleRate, p.g.rateReason
		} else {
			p.inMinute++ // only calls let through consume quota
		}
	}
	took := int64(1 + p.r.intn(4)) // a refusal is answered by the gateway itself
	if c.decision == audit.Allowed {
		lat := p.r.lognormal(spec.median, spec.sigma)
		c.status = "ok"
		if p.forceErr || (!p.noErr && p.r.chance(p.g.sc.errRate)) {
			c.status = "error"
			switch x := p.r.float(); {
			case p.forceErr:
				c.errCode = p.errCode
			case x < 0.3 && spec.median >= 100: // a heavy call times out at the gateway's 30 s deadline
				lat = 30000 + 50*p.r.float()
				c.errCode = -32001
			case x < 0.75:
				c.errCode = -32603
			default: // a result with isError: true carries no JSON-RPC code
			}
		}
		c.latency = math.Round(lat*10) / 10
		took = int64(math.Ceil(c.latency))
	}
	p.s.calls = append(p.s.calls, c)
	p.lastStart, p.lastTool, p.lastArgs = p.t, tool, a
	p.t += took
	return result{decision: c.decision, ok: c.status == "ok", planned: true}
}

// callPatiently retries a rate-limited call with a doubling back-off, as
// scripted clients do, until it goes through or the limit window has surely
// passed.
func (p *planner) callPatiently(tool string, a *argSet) result {
	res := p.call(tool, a)
	for d := int64(2000); res.decision == audit.RateLimited && d <= 64000; d *= 2 {
		p.until(p.lastStart + d + int64(p.r.intn(250)))
		res = p.call(tool, a)
	}
	return res
}

func (p *planner) wait(ms int64) { p.t += ms }

// until moves the clock forward to t (never back).
func (p *planner) until(t int64) {
	if t > p.t {
		p.t = t
	}
}

// think waits a lognormal time: an LLM turn or a script's pause.
func (p *planner) think(medianMS, sigma float64) {
	p.t += int64(p.r.lognormal(medianMS, sigma))
}

// poll calls tool with the same arguments n times, interval apart from start
// to start with a small relative jitter, as an agent sleeping in a loop does.
// It stops early when the gateway refuses a call.
func (p *planner) poll(tool string, a *argSet, n int, interval int64, jitter float64) {
	for i := 0; i < n; i++ {
		d := float64(interval) * (1 + float64(jitter*(2*p.r.float()-1)))
		p.until(p.lastStart + int64(d))
		if res := p.call(tool, a); !res.planned || res.decision != audit.Allowed {
			return
		}
	}
}

// exec runs a command in a guest and polls vm_agent_exec_status with the same
// arguments until it exits. It reports whether the exec call went through.
func (p *planner) exec(vm guest, command string, polls int, interval int64) bool {
	res := p.call("vm_agent_exec", p.args(str("command", command), str("node", vm.node), num("vmid", vm.vmid)))
	if !res.ok {
		return false
	}
	pid := 1000 + p.r.intn(60000)
	p.poll("vm_agent_exec_status", p.args(str("node", vm.node), num("pid", pid), num("vmid", vm.vmid)), polls, interval, 0.04)
	return true
}

// task polls get_task_status for the task a write call started.
func (p *planner) task(node, kind string, vmid, polls int, interval int64) {
	p.poll("get_task_status", p.args(str("node", node), str("upid", p.upid(node, kind, vmid))), polls, interval, 0.05)
}

// upid returns a Proxmox task id for a task started now.
func (p *planner) upid(node, kind string, vmid int) string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%d:%s@pve!mcp:",
		node, 0x10000+p.r.intn(0xfff000), p.r.intn(0x7fffffff), p.lastStart/1000, kind, vmid, p.s.grant)
}

// uuid returns a version-4-shaped UUID drawn from r.
func uuid(r *rng) string {
	var b [16]byte
	x, y := r.u64(), r.u64()
	for i := 0; i < 8; i++ {
		b[i], b[8+i] = byte(x>>(8*i)), byte(y>>(8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
