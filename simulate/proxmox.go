package simulate

import (
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// Grants and agents of the simulated deployment.
const (
	grantOps  = "ops-bot"
	grantCI   = "ci-runner"
	grantDash = "readonly-dashboard"
	grantHelp = "helpdesk"

	agentClaude    = "ops-claude"
	agentCopilot   = "ops-copilot"
	agentCI        = "gitlab-runner"
	agentGrafana   = "grafana-sync"
	agentInventory = "nightly-inventory"
	agentHelp      = "support-assistant"
)

var opsAgents = []string{agentClaude, agentClaude, agentCopilot} // Claude does most of the ops work

// Think times in ms: an LLM turn, and a script between two steps.
const (
	llmThink    = 3500.0
	scriptThink = 350.0
)

var (
	quickCommands = []string{
		"uptime", "df -h", "free -m", "systemctl status nginx --no-pager", "cat /etc/os-release",
		"journalctl -u nginx -n 100 --no-pager", "ss -tlnp", "docker ps", "apt list --upgradable",
		"systemctl restart nginx", "du -sh /var/log", "tail -n 200 /var/log/syslog",
	}
	// hangingCommands never exit: an agent that polls them forever is a runaway loop.
	hangingCommands = []string{"tail -f /var/log/syslog", "journalctl -f -u pveproxy", "apt-get -y dist-upgrade", "ping 10.0.0.1"}
	ciCommands      = []string{"/opt/ci/run-tests.sh", "make -C /srv/app test", "/opt/ci/integration.sh --fast", "docker compose -f /srv/app/ci.yml up --abort-on-container-exit"}
	logFiles        = []string{"/var/log/nginx/error.log", "/var/log/syslog", "/etc/nginx/nginx.conf", "/var/log/apt/history.log"}
)

// typicalPolls is how many status polls a normal command needs: 3 to 14.
func typicalPolls(r *rng) int { return 3 + r.intn(6) + r.intn(6) }

// pollInterval is an agent's habit: each sleeps its own fixed time between polls.
func pollInterval(agent string) int64 {
	if agent == agentCopilot {
		return 3000
	}
	return 2000
}

func vmArgs(p *planner, vm guest) *argSet {
	return p.args(str("node", vm.node), num("vmid", vm.vmid))
}

// readAbout makes one read call about vm or its node, never repeating the
// previous call exactly (a repeat is the polling signal the detectors look for).
func readAbout(p *planner, vm guest, menu []weightedTool) {
	w := make([]float64, len(menu))
	for i, m := range menu {
		w[i] = m.w
	}
	for try := 0; try < 4; try++ {
		tool := menu[p.r.weighted(w)].tool
		a := readArgs(p, tool, vm)
		if tool == p.lastTool && a == p.lastArgs {
			continue
		}
		p.call(tool, a)
		return
	}
}

type weightedTool struct {
	tool string
	w    float64
}

var opsReads = []weightedTool{
	{"get_vm_status", 30}, {"get_vm_config", 14}, {"get_vm_rrddata", 8}, {"list_vm_snapshots", 5},
	{"get_node_status", 10}, {"list_vms", 8}, {"list_node_tasks", 5}, {"get_node_syslog", 3},
	{"get_node_storage_status", 4}, {"vm_agent_get_info", 3}, {"list_containers", 3}, {"get_container_status", 3},
}

var helpReads = []weightedTool{
	{"get_vm_status", 10}, {"get_vm_config", 4}, {"list_vms", 2}, {"get_vm_rrddata", 2},
	{"get_node_status", 1}, {"get_container_status", 2},
}

// readArgs builds realistic arguments for a read tool about vm.
func readArgs(p *planner, tool string, vm guest) *argSet {
	node := str("node", vm.node)
	switch tool {
	case "get_vm_rrddata":
		return p.args(node, str("timeframe", pick(p.r, []string{"hour", "hour", "day", "week"})), num("vmid", vm.vmid))
	case "vm_agent_get_info":
		return p.args(str("info_type", pick(p.r, []string{"get-osinfo", "network-get-interfaces", "get-fsinfo"})), node, num("vmid", vm.vmid))
	case "get_node_status", "list_vms", "list_containers":
		return p.args(node)
	case "list_node_tasks":
		return p.args(num("limit", pick(p.r, []int{20, 50})), node)
	case "get_node_syslog":
		return p.args(num("limit", pick(p.r, []int{100, 200, 500})), node)
	case "get_node_storage_status":
		return p.args(node, str("storage", pick(p.r, p.g.w.storages)))
	case "get_container_status":
		ct := pick(p.r, p.g.w.cts)
		return p.args(str("node", ct.node), num("vmid", ct.vmid))
	default: // get_vm_status, get_vm_config, list_vm_snapshots
		return vmArgs(p, vm)
	}
}

// orient is how an ops agent starts: what runs where.
func orient(p *planner) {
	switch p.r.intn(3) {
	case 0:
		p.call("get_cluster_resources", p.args(str("type", "vm")))
	case 1:
		p.call("list_nodes", p.args())
	default:
		p.call("get_cluster_status", p.args())
	}
}

// planOps: an ops agent investigating VMs, sometimes running a command in a
// guest or changing something.
func planOps(p *planner) {
	p.as(grantOps, pick(p.r, opsAgents))
	orient(p)
	vm := p.g.w.hotVM(p.r)
	steps := p.r.between(4, 20)
	for i := 0; i < steps && p.live(); i++ {
		p.think(llmThink, 0.7)
		switch x := p.r.float(); {
		case x < 0.07:
			if p.exec(vm, pick(p.r, quickCommands), typicalPolls(p.r), pollInterval(p.s.agent)) && p.r.chance(0.3) {
				p.think(llmThink, 0.6)
				p.call("vm_agent_file_read", p.args(str("file", pick(p.r, logFiles)), str("node", vm.node), num("vmid", vm.vmid)))
			}
		case x < 0.10:
			writeAction(p, vm)
		case x < 0.22:
			vm = p.g.w.hotVM(p.r)
			readAbout(p, vm, opsReads)
		default:
			readAbout(p, vm, opsReads)
		}
	}
}

// writeAction changes a VM, and waits for the task it started. Taking a VM
// down is rarer: see planDestructive.
func writeAction(p *planner, vm guest) {
	a := vmArgs(p, vm)
	switch p.r.weighted([]float64{3, 2, 2, 1}) {
	case 0:
		if p.call("start_vm", a).ok {
			p.task(vm.node, "qmstart", vm.vmid, p.r.between(2, 6), 1000)
		}
	case 1:
		if p.r.chance(0.5) {
			p.call("update_vm_config", p.args(num("memory", pick(p.r, []int{2048, 4096, 8192, 16384})), str("node", vm.node), num("vmid", vm.vmid)))
		} else {
			p.call("update_vm_config", p.args(num("cores", pick(p.r, []int{2, 4, 8})), str("node", vm.node), num("vmid", vm.vmid)))
		}
	case 2:
		snap := "mcp-" + time.UnixMilli(p.t).UTC().Format("20060102-1504")
		if p.call("create_vm_snapshot", p.args(str("node", vm.node), str("snapname", snap), num("vmid", vm.vmid))).ok {
			p.task(vm.node, "qmsnapshot", vm.vmid, p.r.between(2, 8), 1000)
		}
	default:
		target := p.g.w.otherNode(p.r, vm.node)
		if p.call("migrate_vm", p.args(str("node", vm.node), boolean("online", true), str("target", target), num("vmid", vm.vmid))).ok {
			p.task(vm.node, "qmigrate", vm.vmid, p.r.between(6, 15), 2000)
		}
	}
}

// planCI: a pipeline runs its test jobs in a warm runner VM, starting it when
// it is down; now and then it clones a fresh runner from the template first.
func planCI(p *planner) {
	p.as(grantCI, agentCI)
	w := p.g.w
	runner := pick(p.r, w.runners)
	if p.r.chance(0.15) {
		p.call("get_next_vmid", p.args())
		p.think(scriptThink, 0.4)
		newid := 8100 + p.r.intn(800)
		t := w.template
		if p.call("clone_vm", p.args(boolean("full", true), str("name", fmt.Sprintf("ci-runner-%d", newid)), num("newid", newid), str("node", t.node), num("vmid", t.vmid))).ok {
			p.task(t.node, "qmclone", t.vmid, p.r.between(5, 15), 2000)
		}
		runner = guest{vmid: newid, node: t.node}
	} else {
		p.call("get_vm_status", vmArgs(p, runner))
	}
	if p.r.chance(0.3) {
		p.think(scriptThink, 0.4)
		if p.call("start_vm", vmArgs(p, runner)).ok {
			p.task(runner.node, "qmstart", runner.vmid, p.r.between(2, 5), 1000)
		}
		p.wait(int64(p.r.between(8000, 20000))) // boot
	}
	p.think(scriptThink, 0.4)
	p.call("vm_agent_get_info", p.args(str("info_type", "get-osinfo"), str("node", runner.node), num("vmid", runner.vmid)))
	for jobs := p.r.between(1, 3); jobs > 0 && p.live(); jobs-- {
		p.think(scriptThink, 0.4)
		if p.exec(runner, pick(p.r, ciCommands), p.r.between(3, 15), 5000) {
			p.think(scriptThink, 0.4)
			p.call("vm_agent_file_read", p.args(str("file", "/srv/app/report/junit.xml"), str("node", runner.node), num("vmid", runner.vmid)))
		}
	}
}

// planDashboard: a dashboard refreshes the cluster overview every 5 minutes
// for a few hours.
func planDashboard(p *planner) {
	p.as(grantDash, agentGrafana)
	stop := p.t + int64(p.r.between(2, 8))*msPerHour
	for p.t < stop && p.live() {
		tick := p.t
		p.call("get_cluster_resources", p.args())
		for _, n := range p.g.w.nodes {
			p.wait(int64(p.r.between(5, 40)))
			p.call("get_node_status", p.args(str("node", n)))
		}
		p.wait(int64(p.r.between(5, 40)))
		p.call("get_ha_status", p.args())
		p.until(tick + 5*msPerMinute + int64(p.r.between(-1500, 1500)))
	}
}

// planInventory: a nightly job enumerates every guest's status and config, fast enough
// to run into the session rate limit, and waits for the next minute when it
// does. Many vmids, one call each: enumeration, not polling.
func planInventory(p *planner) {
	p.as(grantDash, agentInventory)
	w := p.g.w
	p.call("list_nodes", p.args())
	for _, n := range w.nodes {
		p.wait(int64(p.r.between(150, 400)))
		p.call("list_vms", p.args(str("node", n)))
	}
	for _, vm := range w.vms {
		p.wait(int64(p.r.between(150, 400)))
		p.callPatiently("get_vm_status", vmArgs(p, vm))
	}
	for _, vm := range w.vms {
		p.wait(int64(p.r.between(150, 400)))
		p.callPatiently("get_vm_config", vmArgs(p, vm))
	}
	for _, ct := range w.cts {
		p.wait(int64(p.r.between(150, 400)))
		p.callPatiently("get_container_status", p.args(str("node", ct.node), num("vmid", ct.vmid)))
	}
}

// planHelpdesk: a support assistant looks at a user's VM; now and then it
// tries to fix it itself and is denied.
func planHelpdesk(p *planner) {
	p.as(grantHelp, agentHelp)
	vm := p.g.w.vms[p.r.intn(len(p.g.w.vms))]
	p.call("get_vm_status", vmArgs(p, vm))
	for n := p.r.between(1, 7); n > 0 && p.live(); n-- {
		p.think(llmThink, 0.6)
		readAbout(p, vm, helpReads)
	}
	switch x := p.r.float(); {
	case x < 0.10:
		p.think(llmThink, 0.6)
		p.call(pick(p.r, []string{"reboot_vm", "start_vm"}), vmArgs(p, vm))
	case x < 0.13:
		p.think(llmThink, 0.6)
		p.call("vm_agent_exec", p.args(str("command", "systemctl restart nginx"), str("node", vm.node), num("vmid", vm.vmid)))
	}
}

// planRunaway: an agent starts a command that never exits and keeps polling
// its status, far beyond any normal loop.
func planRunaway(p *planner) {
	p.as(grantOps, pick(p.r, opsAgents))
	vm := p.g.w.hotVM(p.r)
	p.call("get_vm_status", vmArgs(p, vm))
	p.think(llmThink, 0.5)
	p.exec(vm, pick(p.r, hangingCommands), p.r.between(110, 400), pollInterval(p.s.agent))
}

// planDestructive: the rare destructive change, usually let through.
func planDestructive(p *planner) {
	p.as(grantOps, agentClaude)
	vm := p.g.w.hotVM(p.r)
	a := vmArgs(p, vm)
	switch p.r.weighted([]float64{3, 2, 2, 2, 3}) {
	case 0:
		p.call("list_vm_snapshots", a)
		p.think(llmThink, 0.5)
		if p.call("delete_vm_snapshot", p.args(str("node", vm.node), str("snapname", "pre-upgrade"), num("vmid", vm.vmid))).ok {
			p.task(vm.node, "qmdelsnapshot", vm.vmid, p.r.between(2, 4), 1000)
		}
	case 1:
		p.call("get_vm_status", a)
		p.think(llmThink, 0.5)
		if p.call("stop_vm", a).ok {
			p.task(vm.node, "qmstop", vm.vmid, p.r.between(2, 4), 1000)
		}
		p.think(llmThink, 0.5)
		if p.call("delete_vm", p.args(str("node", vm.node), boolean("purge", true), num("vmid", vm.vmid))).ok {
			p.task(vm.node, "qmdestroy", vm.vmid, p.r.between(2, 5), 1000)
		}
	case 2:
		p.call("list_vm_snapshots", a)
		p.think(llmThink, 0.5)
		p.call("rollback_vm_snapshot", p.args(str("node", vm.node), str("snapname", "pre-upgrade"), num("vmid", vm.vmid)))
	case 3:
		p.call("list_storage_content", p.args(str("content", "images"), str("node", vm.node), str("storage", "local-lvm")))
		p.think(llmThink, 0.5)
		p.call("delete_storage_volume", p.args(str("node", vm.node), str("storage", "local-lvm"), str("volume", fmt.Sprintf("local-lvm:vm-%d-disk-1", vm.vmid))))
	default:
		p.call("get_vm_status", a)
		p.think(llmThink, 0.5)
		if tool := pick(p.r, []string{"reboot_vm", "shutdown_vm"}); p.call(tool, a).ok {
			p.task(vm.node, map[string]string{"reboot_vm": "qmreboot", "shutdown_vm": "qmshutdown"}[tool], vm.vmid, p.r.between(2, 6), 1500)
		}
	}
}

// planRetryStorm: a VM is locked, and the agent retries the same start call
// quickly until it gives up, at a fixed pace or with a doubling back-off.
func planRetryStorm(p *planner) {
	p.as(grantOps, pick(p.r, opsAgents))
	vm := p.g.w.hotVM(p.r)
	a := vmArgs(p, vm)
	p.call("get_vm_status", a)
	p.think(llmThink, 0.5)
	p.forceErr, p.errCode = true, -32603 // "VM is locked (backup)"
	defer func() { p.forceErr = false }()
	p.call("start_vm", a)
	n := p.r.between(5, 13)
	if p.r.chance(0.5) {
		p.poll("start_vm", a, n, int64(p.r.between(700, 1500)), 0.1)
		return
	}
	for d := int64(500); n > 0 && p.live(); n, d = n-1, min(2*d, 16000) {
		p.until(p.lastStart + d)
		p.call("start_vm", a)
	}
}

// planProbe: an assistant tries tools it has no business calling, several in
// a minute.
func planProbe(p *planner) {
	p.as(grantHelp, agentHelp)
	vm := p.g.w.hotVM(p.r)
	probes := []func(){
		func() { p.call("proxmox_api_raw", p.args(str("method", "GET"), str("path", "/access/users"))) },
		func() {
			p.call("vm_agent_set_password", p.args(str("node", vm.node), str("password", "Welcome2024!"), str("username", "root"), num("vmid", vm.vmid)))
		},
		func() {
			p.call("vm_agent_exec", p.args(str("command", "cat /etc/shadow"), str("node", vm.node), num("vmid", vm.vmid)))
		},
		func() {
			p.call("create_user_token", p.args(boolean("privsep", false), str("tokenid", "helpdesk"), str("userid", "root@pam")))
		},
		func() {
			p.call("update_acl", p.args(str("path", "/"), str("roles", "Administrator"), str("users", "helpdesk@pve")))
		},
	}
	for i := len(probes) - 1; i > 0; i-- { // shuffle
		j := p.r.intn(i + 1)
		probes[i], probes[j] = probes[j], probes[i]
	}
	for i, n := 0, p.r.between(3, 5); i < n && p.live(); i++ {
		if i > 0 {
			p.wait(int64(p.r.between(4000, 12000)))
		}
		probes[i]()
	}
}

// planTypo: an agent misspells a tool, is denied, and corrects itself.
func planTypo(p *planner) {
	p.as(grantOps, pick(p.r, opsAgents))
	node := pick(p.r, p.g.w.nodes)
	p.call(unknownTool, p.args(str("node", node)))
	p.think(llmThink, 0.5)
	p.call("list_vms", p.args(str("node", node)))
	vm := p.g.w.hotVM(p.r)
	p.think(llmThink, 0.5)
	p.call("get_vm_status", vmArgs(p, vm))
}

// planAdmin: an agent rotates the CI token and tries to grant it a role.
func planAdmin(p *planner) {
	p.as(grantOps, agentClaude)
	p.call("list_user_tokens", p.args(str("userid", "ci@pve")))
	p.think(llmThink, 0.5)
	token := "gitlab-" + time.UnixMilli(p.t).UTC().Format("200601")
	expire := int((p.t + 90*msPerDay) / 1000)
	if p.call("create_user_token", p.args(str("comment", "GitLab runner"), num("expire", expire), boolean("privsep", true), str("tokenid", token), str("userid", "ci@pve"))).decision == audit.Allowed {
		p.think(llmThink, 0.5)
		p.call("update_acl", p.args(str("path", "/vms"), str("roles", "PVEVMUser"), str("tokens", "ci@pve!"+token)))
	}
}

// proxmoxPolicy is the deployment's current, hand-written policy: ops-bot may
// call anything visible, the others have allow-lists.
var proxmoxPolicy = &gatewayPolicy{
	version:  "2025-03-14.2",
	hidden:   set("proxmox_api_raw", "vm_agent_set_password", "send_vm_monitor_command", "join_cluster"),
	approval: set("rollback_vm_snapshot", "update_acl"),
	grants: map[string]map[string]bool{
		grantCI: set("get_next_vmid", "clone_vm", "get_vm_status", "get_vm_config", "list_vms", "start_vm", "shutdown_vm",
			"get_task_status", "vm_agent_get_info", "vm_agent_exec", "vm_agent_exec_status", "vm_agent_file_read"),
		grantDash: set("get_cluster_resources", "get_cluster_status", "get_ha_status", "list_nodes", "get_node_status",
			"list_vms", "get_vm_status", "get_vm_config", "get_container_status", "list_containers"),
		grantHelp: set("get_vm_status", "get_vm_config", "list_vms", "get_vm_rrddata", "get_node_status",
			"get_container_status", "list_containers", "list_nodes", "get_cluster_resources"),
	},
	perMinute: 60,
}

var proxmoxScenario = &scenario{
	name: "proxmox",
	description: "14 days of a Proxmox cluster's MCP traffic: ops agents investigating and fixing VMs (exec + status polling), " +
		"CI pipelines, a dashboard, a nightly inventory, a helpdesk assistant; mostly reads, some denials and errors, " +
		"a few runaway polling loops, retry storms, denied probes, destructive calls and a mistyped tool",
	span:    14 * 24 * time.Hour,
	errRate: 0.015,
	policy:  proxmoxPolicy,
	world:   func() *world { return newWorld("proxmox", 4, 60, 20) },
	kinds: []*kind{
		{name: "ops", perDay: 40, prof: &officeHours, plan: planOps},
		{name: "ci", perDay: 20, prof: &officeHours, plan: planCI},
		{name: "dashboard", perDay: 3, prof: &aroundTheClock, plan: planDashboard},
		{name: "helpdesk", perDay: 25, prof: &officeHours, plan: planHelpdesk},
		{name: "inventory", perDay: 1, prof: &nightly, plan: planInventory},
	},
	incidents: []*kind{
		{name: "runaway", perWeek: 3, prof: &officeHours, plan: planRunaway},
		{name: "destructive", perWeek: 3, prof: &officeHours, plan: planDestructive},
		{name: "retry-storm", perWeek: 2, prof: &officeHours, plan: planRetryStorm},
		{name: "probe", perWeek: 1, prof: &officeHours, plan: planProbe},
		{name: "typo", perWeek: 1, prof: &officeHours, plan: planTypo},
		{name: "admin", perWeek: 0.5, prof: &officeHours, plan: planAdmin},
	},
}

var smallScenario = &scenario{
	name: "small",
	description: "a few hundred events over 2 days on a 2-node cluster, for golden files: ops, CI and helpdesk sessions, " +
		"a nightly inventory, one each of destructive call, retry storm, denied probe and mistyped tool",
	span:    2 * 24 * time.Hour,
	errRate: 0.015,
	policy:  proxmoxPolicy,
	world:   func() *world { return newWorld("small", 2, 10, 3) },
	kinds: []*kind{
		{name: "ops", perDay: 4, prof: &everyDay, plan: planOps},
		{name: "ci", perDay: 1.5, prof: &everyDay, plan: planCI},
		{name: "helpdesk", perDay: 4, prof: &everyDay, plan: planHelpdesk},
		{name: "inventory", perDay: 1, prof: &nightly, plan: planInventory},
	},
	incidents: []*kind{
		{name: "destructive", perWeek: 3.5, prof: &everyDay, plan: planDestructive},
		{name: "retry-storm", perWeek: 3.5, prof: &everyDay, plan: planRetryStorm},
		{name: "probe", perWeek: 3.5, prof: &everyDay, plan: planProbe},
		{name: "typo", perWeek: 3.5, prof: &everyDay, plan: planTypo},
	},
}

// scenarios is every scenario, in no particular order (Scenarios sorts).
var scenarios = []*scenario{proxmoxScenario, smallScenario, loopsScenario}

func init() {
	for _, sc := range scenarios {
		if len(sc.kinds) > 16 {
			panic("simulate: a scenario has more than 16 session kinds") // arrivals.fire's weight buffer
		}
		sc.prepare()
	}
}
