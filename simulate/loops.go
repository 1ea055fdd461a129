package simulate

import (
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// LoopsGroundTruth describes what the "loops" scenario plants on top of its
// background traffic, for detector tests to assert against. The planted
// sessions do not depend on Options.Seed: their session ids, arguments and
// timing (relative to Now) are the same for every seed; only the background
// traffic around them varies. Every Ago is measured back from Options.Now
// truncated to the millisecond. It holds when Count is 0 and Duration is 0 or at
// least Span; a shorter Duration drops the sessions that start before it, and
// Count may stop the stream before the last of them.
//
// The background holds only reads by the ops-bot, helpdesk and
// readonly-dashboard grants: no polling (no call repeats the previous one), no
// denial, no rate limit, no write, and single random upstream errors (~1%).
type LoopsGroundTruth struct {
	Server string
	Span   time.Duration // the scenario's default Duration

	// Polling lists the planted polling pairs and their normal loops. Every
	// poll of a loop has the same args_hash; every call of a loop is allowed
	// and succeeds. The runaway loops of a pair are listed in Runaway, not here.
	Polling []PlantedPolling
	// Runaway loops poll far longer than the pair's normal loops (more than
	// 3 × their p95).
	Runaway []PlantedLoop
	// RetryStorms repeat one call with the same arguments quickly, every
	// call failing upstream.
	RetryStorms []PlantedRetryStorm
	// DeniedProbes are sessions calling hidden or denied tools in a burst.
	DeniedProbes []PlantedProbe
	// RareRisky are destructive calls made once in the window (allowed, ok).
	RareRisky []PlantedCall
	// UsedOnce is a read tool called exactly once in the window, 20 days
	// before Now (rarely used with a 30-day window, unused with 14 days).
	UsedOnce PlantedCall
	// Unknown is a tool name the catalog does not list, denied each time.
	Unknown PlantedCall
}

// PlantedPolling is one polling pair: StartTool, then PollTool polled with
// the same arguments.
type PlantedPolling struct {
	StartTool string
	PollTool  string
	Loops     []PlantedLoop
}

// PollCounts returns the number of polls of each loop, in Loops order.
func (pp PlantedPolling) PollCounts() []int {
	out := make([]int, len(pp.Loops))
	for i, l := range pp.Loops {
		out[i] = l.Polls
	}
	return out
}

// PlantedLoop is one planted polling loop: its own session, whose first call
// is StartTool at Now-Ago, followed by Polls calls of PollTool with identical
// arguments, Interval apart (start to start) within ±Jitter (relative), then
// one closing get_vm_status.
type PlantedLoop struct {
	Session   string
	Agent     string
	Grant     string
	Ago       time.Duration
	StartTool string
	PollTool  string
	Polls     int
	Interval  time.Duration
	Jitter    float64
}

// PlantedRetryStorm is one call repeated after errors: Calls calls of Tool
// with identical arguments, the first at Now-Ago, Interval apart within
// ±Jitter, all with status "error" and ErrorCode. The session calls
// get_vm_status (ok) 3 s before the storm.
type PlantedRetryStorm struct {
	Session   string
	Agent     string
	Grant     string
	Ago       time.Duration
	Tool      string
	Calls     int
	Interval  time.Duration
	Jitter    float64
	ErrorCode int64
}

// PlantedProbe is a session whose calls, all refused, fall within Within of
// the first one at Now-Ago.
type PlantedProbe struct {
	Session string
	Agent   string
	Grant   string
	Ago     time.Duration
	Within  time.Duration
	Calls   []PlantedDecision
}

// PlantedDecision is one call of a probe and the gateway's decision on it.
type PlantedDecision struct {
	Tool     string
	Decision audit.Decision
}

// PlantedCall is a tool called Calls times in one session, the first call at
// Now-Ago, each decided Decision. No other session calls Tool.
type PlantedCall struct {
	Session  string
	Agent    string
	Grant    string
	Ago      time.Duration
	Tool     string
	Calls    int
	Decision audit.Decision
}

// LoopsTruth is the ground truth of the "loops" scenario.
var LoopsTruth LoopsGroundTruth

// loopsPlants are the planted sessions behind LoopsTruth.
var loopsPlants []plant

const day = 24 * time.Hour

// Poll counts of the planted normal loops: exec loops of 3 to 12 polls
// (p95 12), clone loops of 4 to 15.
var (
	execLoopPolls  = []int{5, 7, 4, 9, 6, 3, 8, 5, 11, 6, 4, 7, 12, 5, 6, 8, 3, 10, 6, 5, 7, 4, 9, 6, 5, 8, 6, 12, 4, 7, 5, 6, 9, 3, 7, 6}
	cloneLoopPolls = []int{6, 9, 5, 12, 8, 7, 15, 6, 10, 8, 4, 11}
)

func init() { LoopsTruth, loopsPlants = buildLoops() }

// buildLoops lays out the planted sessions and their description together, so
// that the two cannot drift apart.
func buildLoops() (LoopsGroundTruth, []plant) {
	w := loopsScenario.world()
	truth := LoopsGroundTruth{Server: server, Span: loopsScenario.span}
	var plants []plant
	add := func(ago time.Duration, plan func(p *planner)) string {
		n := uint64(len(plants))
		id := uuid(newRNG(plantedSeed, 1<<32+n))
		plants = append(plants, plant{ago: ago, session: id, seed: n, plan: plan})
		return id
	}
	const jitter = 0.03

	execPair := PlantedPolling{StartTool: "vm_agent_exec", PollTool: "vm_agent_exec_status"}
	for i, polls := range execLoopPolls {
		vm := w.vms[(i*7)%len(w.vms)]
		ago := (29*day*time.Duration(len(execLoopPolls)-i)/time.Duration(len(execLoopPolls)+1) + time.Duration(i%5)*53*time.Minute).Round(time.Second)
		l := PlantedLoop{Agent: agentClaude, Grant: grantOps, Ago: ago, StartTool: execPair.StartTool, PollTool: execPair.PollTool,
			Polls: polls, Interval: 2 * time.Second, Jitter: jitter}
		cmd := quickCommands[i%len(quickCommands)]
		l.Session = add(ago, func(p *planner) { plantedExec(p, l, vm, cmd) })
		execPair.Loops = append(execPair.Loops, l)
	}
	clonePair := PlantedPolling{StartTool: "clone_vm", PollTool: "get_task_status"}
	for i, polls := range cloneLoopPolls {
		ago := (28*day*time.Duration(len(cloneLoopPolls)-i)/time.Duration(len(cloneLoopPolls)+1) + 2*time.Hour + time.Duration(i%3)*41*time.Minute).Round(time.Second)
		l := PlantedLoop{Agent: agentCI, Grant: grantCI, Ago: ago, StartTool: clonePair.StartTool, PollTool: clonePair.PollTool,
			Polls: polls, Interval: 3 * time.Second, Jitter: jitter}
		newid := 8200 + i
		l.Session = add(ago, func(p *planner) { plantedClone(p, l, w.template, newid) })
		clonePair.Loops = append(clonePair.Loops, l)
	}
	truth.Polling = []PlantedPolling{execPair, clonePair}

	for i, r := range []struct {
		ago   time.Duration
		polls int
	}{{12*day + 3*time.Hour, 180}, {4*day + 5*time.Hour, 260}} {
		vm := w.vms[3+i]
		l := PlantedLoop{Agent: agentClaude, Grant: grantOps, Ago: r.ago, StartTool: "vm_agent_exec", PollTool: "vm_agent_exec_status",
			Polls: r.polls, Interval: 2 * time.Second, Jitter: jitter}
		cmd := hangingCommands[i]
		l.Session = add(r.ago, func(p *planner) { plantedExec(p, l, vm, cmd) })
		truth.Runaway = append(truth.Runaway, l)
	}

	storm := PlantedRetryStorm{Agent: agentCopilot, Grant: grantOps, Ago: 7*day + 2*time.Hour, Tool: "start_vm", Calls: 8,
		Interval: time.Second, Jitter: 0.1, ErrorCode: -32603}
	stormVM := w.vms[5]
	storm.Session = add(storm.Ago+3*time.Second, func(p *planner) { plantedStorm(p, storm, stormVM) })
	truth.RetryStorms = []PlantedRetryStorm{storm}

	probe := PlantedProbe{Agent: agentHelp, Grant: grantHelp, Ago: 3*day + 4*time.Hour, Within: time.Minute, Calls: []PlantedDecision{
		{"proxmox_api_raw", audit.Hidden},
		{"vm_agent_exec", audit.Denied},
		{"vm_agent_set_password", audit.Hidden},
		{"create_user_token", audit.Denied},
		{"update_acl", audit.Denied},
		{"delete_storage_volume", audit.Denied},
	}}
	probeVM := w.vms[8]
	probe.Session = add(probe.Ago, func(p *planner) { plantedProbe(p, probe, probeVM) })
	truth.DeniedProbes = []PlantedProbe{probe}

	del := PlantedCall{Agent: agentClaude, Grant: grantOps, Ago: 9*day + time.Hour, Tool: "delete_vm", Calls: 1, Decision: audit.Allowed}
	delVM := w.vms[len(w.vms)-1]
	del.Session = add(del.Ago+3*time.Second, func(p *planner) {
		p.as(del.Grant, del.Agent)
		p.call("get_vm_status", vmArgs(p, delVM))
		p.until(p.end - del.Ago.Milliseconds())
		p.call("delete_vm", p.args(str("node", delVM.node), boolean("purge", true), num("vmid", delVM.vmid)))
	})
	truth.RareRisky = []PlantedCall{del}

	once := PlantedCall{Agent: agentClaude, Grant: grantOps, Ago: 20 * day, Tool: "get_node_report", Calls: 1, Decision: audit.Allowed}
	once.Session = add(once.Ago, func(p *planner) {
		p.as(once.Grant, once.Agent)
		p.call("get_node_report", p.args(str("node", w.nodes[1])))
		p.think(llmThink, 0.5)
		p.call("get_node_status", p.args(str("node", w.nodes[1])))
	})
	truth.UsedOnce = once

	typo := PlantedCall{Agent: agentCopilot, Grant: grantOps, Ago: 5*day + 6*time.Hour, Tool: unknownTool, Calls: 2, Decision: audit.Denied}
	typo.Session = add(typo.Ago, func(p *planner) {
		p.as(typo.Grant, typo.Agent)
		a := p.args(str("node", w.nodes[0]))
		p.call(unknownTool, a)
		p.think(llmThink, 0.5)
		p.call(unknownTool, a)
		p.think(llmThink, 0.5)
		p.call("list_vms", a)
	})
	truth.Unknown = typo
	return truth, plants
}

func plantedExec(p *planner, l PlantedLoop, vm guest, cmd string) {
	p.as(l.Grant, l.Agent)
	p.noErr = true
	res := p.call("vm_agent_exec", p.args(str("command", cmd), str("node", vm.node), num("vmid", vm.vmid)))
	if !res.ok {
		return
	}
	a := p.args(str("node", vm.node), num("pid", 1000+p.r.intn(60000)), num("vmid", vm.vmid))
	p.poll("vm_agent_exec_status", a, l.Polls, l.Interval.Milliseconds(), l.Jitter)
	p.think(llmThink, 0.5)
	p.call("get_vm_status", vmArgs(p, vm))
}

func plantedClone(p *planner, l PlantedLoop, tmpl guest, newid int) {
	p.as(l.Grant, l.Agent)
	p.noErr = true
	res := p.call("clone_vm", p.args(boolean("full", true), str("name", "ci-runner-loops"), num("newid", newid), str("node", tmpl.node), num("vmid", tmpl.vmid)))
	if !res.ok {
		return
	}
	a := p.args(str("node", tmpl.node), str("upid", p.upid(tmpl.node, "qmclone", tmpl.vmid)))
	p.poll("get_task_status", a, l.Polls, l.Interval.Milliseconds(), l.Jitter)
	p.think(scriptThink, 0.4)
	p.call("get_vm_status", p.args(str("node", tmpl.node), num("vmid", newid)))
}

func plantedStorm(p *planner, s PlantedRetryStorm, vm guest) {
	p.as(s.Grant, s.Agent)
	p.noErr = true
	a := vmArgs(p, vm)
	p.call("get_vm_status", a)
	p.until(p.end - s.Ago.Milliseconds())
	p.forceErr, p.errCode = true, s.ErrorCode
	p.call(s.Tool, a)
	p.poll(s.Tool, a, s.Calls-1, s.Interval.Milliseconds(), s.Jitter)
}

func plantedProbe(p *planner, pr PlantedProbe, vm guest) {
	p.as(pr.Grant, pr.Agent)
	for i, c := range pr.Calls {
		if i > 0 {
			p.wait(int64(p.r.between(5000, 9000)))
		}
		var a *argSet
		switch c.Tool {
		case "proxmox_api_raw":
			a = p.args(str("method", "GET"), str("path", "/access/users"))
		case "vm_agent_exec":
			a = p.args(str("command", "cat /etc/shadow"), str("node", vm.node), num("vmid", vm.vmid))
		case "vm_agent_set_password":
			a = p.args(str("node", vm.node), str("password", "Welcome2024!"), str("username", "root"), num("vmid", vm.vmid))
		case "create_user_token":
			a = p.args(boolean("privsep", false), str("tokenid", "helpdesk"), str("userid", "root@pam"))
		case "update_acl":
			a = p.args(str("path", "/"), str("roles", "Administrator"), str("users", "helpdesk@pve"))
		default: // delete_storage_volume
			a = p.args(str("node", vm.node), str("storage", "local-lvm"), str("volume", "local-lvm:vm-108-disk-0"))
		}
		p.call(c.Tool, a)
	}
}

// planReader: background ops reads, no writes and no repeated calls.
func planReader(p *planner) {
	p.as(grantOps, pick(p.r, opsAgents))
	orient(p)
	vm := p.g.w.hotVM(p.r)
	for n := p.r.between(3, 16); n > 0 && p.live(); n-- {
		p.think(llmThink, 0.7)
		if p.r.chance(0.15) {
			vm = p.g.w.hotVM(p.r)
		}
		readAbout(p, vm, opsReads)
	}
}

// planHelpReads: background helpdesk reads, never trying anything denied.
func planHelpReads(p *planner) {
	p.as(grantHelp, agentHelp)
	vm := p.g.w.vms[p.r.intn(len(p.g.w.vms))]
	p.call("get_vm_status", vmArgs(p, vm))
	for n := p.r.between(1, 6); n > 0 && p.live(); n-- {
		p.think(llmThink, 0.6)
		readAbout(p, vm, helpReads)
	}
}

var loopsScenario = &scenario{
	name: "loops",
	description: "30 days of read-only background traffic with planted ground truth (LoopsTruth) for detector tests: " +
		"exec→exec_status and clone_vm→get_task_status polling loops, two runaway loops, a retry storm, " +
		"a denied probe burst, one delete_vm, a tool used once 20 days ago, a mistyped tool",
	span:    30 * day,
	errRate: 0.01,
	policy: &gatewayPolicy{
		version: "2025-03-14.2",
		hidden:  set("proxmox_api_raw", "vm_agent_set_password"),
		grants: map[string]map[string]bool{
			grantDash: proxmoxPolicy.grants[grantDash],
			grantHelp: proxmoxPolicy.grants[grantHelp],
		},
		perMinute: 60,
	},
	world: func() *world { return newWorld("loops", 3, 40, 10) },
	kinds: []*kind{
		{name: "reader", perDay: 40, prof: &officeHours, plan: planReader},
		{name: "dashboard", perDay: 3, prof: &aroundTheClock, plan: planDashboard},
		{name: "helpdesk", perDay: 15, prof: &officeHours, plan: planHelpReads},
	},
	plants: func() []plant { return loopsPlants },
}
