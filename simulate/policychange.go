package simulate

import (
	"fmt"
	"slices"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// PolicyChange describes the traffic of PolicyChangeEvents: a grant whose
// agents work every day under policy version "v1", until version "v2" takes
// over at Change and refuses Refused (as hidden). UsedDaily is the tool an
// agent of the grant calls every 15 minutes, every day.
type PolicyChange struct {
	Server, Grant string
	Change        time.Time // the first call under v2
	Refused       string    // the tool v2 hides
	Days          int       // of history before Change
	// Silent: under v2 the agent no longer calls Refused at all, as an
	// agent that lists tools does not call a hidden one.
	Silent bool
}

// The tools of PolicyChangeEvents.
const (
	PolicyChangeUsedDaily = "list_backups"  // backup-bot, every 15 minutes
	PolicyChangeStatus    = "get_vm_status" // both agents
	PolicyChangeList      = "list_vms"      // helpdesk, every 10 minutes
	PolicyChangeUnused    = "delete_vm"     // nobody under v1; helpdesk tries it once under v2
)

// PolicyChangeEvents returns the calls of a policy change until end, in time
// order: backup-bot calls list_backups and get_vm_status every 15 minutes
// (one session per hour), helpdesk list_vms and get_vm_status every 10
// minutes (one session per hour), all allowed under v1. Under v2 the calls
// of pc.Refused are hidden, and helpdesk tries delete_vm once, 10 minutes
// after the change (hidden: v2 hides it too, as v1 denied it by default).
// With pc.Refused = PolicyChangeUnused, v2 refuses only a tool nobody used.
func PolicyChangeEvents(pc PolicyChange, end time.Time) []audit.Event {
	var out []audit.Event
	start := pc.Change.Add(-time.Duration(pc.Days) * 24 * time.Hour).Truncate(time.Hour)
	add := func(ts time.Time, agent, tool string) {
		version, decision, rule := "v1", audit.Allowed, ""
		if !ts.Before(pc.Change) {
			version = "v2"
			if tool == pc.Refused && pc.Silent {
				return
			}
			if tool == pc.Refused || tool == PolicyChangeUnused {
				decision, rule = audit.Hidden, "hide"
			}
		}
		hour := ts.Truncate(time.Hour)
		out = append(out, audit.Event{
			ID: fmt.Sprintf("pc-%s-%s-%d", agent, tool, ts.UnixMilli()), TS: ts, Server: pc.Server, Tool: tool,
			Method: audit.DefaultMethod, Decision: decision, Status: statusOf(decision), Gateway: "gw-1", Grant: pc.Grant,
			Agent: agent, Session: fmt.Sprintf("%s-%s", agent, hour.Format("20060102T15")), Rule: rule,
			ArgsHash: fmt.Sprintf("%s-%d", tool, ts.UnixMilli()), PolicyVersion: version,
		})
	}
	for ts := start; ts.Before(end); ts = ts.Add(5 * time.Minute) {
		m := ts.Minute()
		if m%15 == 0 {
			add(ts.Add(7*time.Second), "backup-bot", PolicyChangeUsedDaily)
			add(ts.Add(9*time.Second), "backup-bot", PolicyChangeStatus)
		}
		if m%10 == 0 {
			add(ts.Add(21*time.Second), "helpdesk", PolicyChangeList)
			add(ts.Add(23*time.Second), "helpdesk", PolicyChangeStatus)
		}
		if probe := pc.Change.Add(10 * time.Minute); !probe.Before(ts) && probe.Before(ts.Add(5*time.Minute)) && probe.Before(end) {
			add(probe, "helpdesk", PolicyChangeUnused)
		}
	}
	slices.SortStableFunc(out, func(a, b audit.Event) int { return a.TS.Compare(b.TS) })
	return out
}

func statusOf(d audit.Decision) string {
	if d == audit.Allowed {
		return "ok"
	}
	return ""
}
