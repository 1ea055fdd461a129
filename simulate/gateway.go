package simulate

import (
	"fmt"

	"github.com/mcptrail/mcptrail/audit"
)

// gatewayPolicy is the policy the simulated gateways enforce: deliberately the
// loose, hand-written kind that mcptrail is meant to tighten.
type gatewayPolicy struct {
	version  string
	hidden   map[string]bool            // removed from tools/list and refused
	approval map[string]bool            // refused with "Requires human approval."
	grants   map[string]map[string]bool // allow-list per grant; a grant not listed may call any visible tool
	// perMinute limits the calls of one session per calendar minute (all tools
	// together); 0 disables the limit.
	perMinute int
}

// Rule names and reasons as PolicyLayer writes them.
const (
	ruleDefaultDeny = "(default deny)"
	ruleHidden      = "(hidden)"
	ruleRate        = "/all_tools/limits/calls-per-minute"
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// decide returns the gateway's decision on a call, before the rate limit.
func (pol *gatewayPolicy) decide(grant, tool string, known bool) (audit.Decision, string, string) {
	switch {
	case !known:
		return audit.Denied, ruleDefaultDeny, fmt.Sprintf("tool %q is not allowed: no such tool on %s", tool, server)
	case pol.hidden[tool]:
		return audit.Hidden, ruleHidden, fmt.Sprintf("tool %q is hidden by policy", tool)
	}
	if allow, ok := pol.grants[grant]; ok && !allow[tool] {
		return audit.Denied, ruleDefaultDeny, fmt.Sprintf("tool %q is not allowed for grant %q", tool, grant)
	}
	if pol.approval[tool] {
		return audit.ApprovalRequired, "/tools/" + tool + "/deny_if/0", "Requires human approval."
	}
	return audit.Allowed, "", ""
}

func (pol *gatewayPolicy) rateReason() string {
	return fmt.Sprintf("rate limit exceeded: %d calls per minute per session", pol.perMinute)
}
