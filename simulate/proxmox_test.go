package simulate

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// TestCategoriesAgreeWithRiskHints keeps this package's own labels in line
// with the hand-written hints the catalog classifier is tested against.
func TestCategoriesAgreeWithRiskHints(t *testing.T) {
	raw, err := os.ReadFile("../testdata/proxmox-mcp.risk-hints.json")
	require.NoError(t, err)
	var hints map[string]struct {
		Category string `json:"category"`
	}
	require.NoError(t, json.Unmarshal(raw, &hints))
	for name, spec := range tools {
		assert.Equal(t, hints[name].Category, spec.cat.String(), name)
	}
}

// TestProxmoxIsRealistic checks the shape SPEC §5's detectors rely on, over
// several seeds.
func TestProxmoxIsRealistic(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		evs, st := collect(t, Options{Seed: seed, Now: testNow})
		t.Run("volume", func(t *testing.T) {
			assert.Greater(t, st.Events, 20000)
			assert.Less(t, st.Events, 80000)
			grants, agents := map[string]bool{}, map[string]bool{}
			for _, e := range evs {
				grants[e.Grant], agents[e.Agent] = true, true
			}
			assert.GreaterOrEqual(t, len(grants), 4)
			assert.GreaterOrEqual(t, len(agents), 5)
		})
		t.Run("mostly reads from few tools", func(t *testing.T) {
			reads, used := 0, map[string]bool{}
			for _, e := range evs {
				used[e.Tool] = true
				if s, ok := tools[e.Tool]; ok && s.cat == catRead {
					reads++
				}
			}
			assert.GreaterOrEqual(t, float64(reads)/float64(len(evs)), 0.80)
			assert.GreaterOrEqual(t, len(used), 20)
			assert.LessOrEqual(t, len(used), 40)
		})
		t.Run("decisions and errors", func(t *testing.T) {
			for _, d := range audit.Decisions {
				assert.Positive(t, st.ByDecision[d], d)
			}
			allowed, failed := 0, 0
			for _, e := range evs {
				if e.Decision == audit.Allowed {
					allowed++
					if e.Status == "error" {
						failed++
					}
				}
			}
			share := float64(failed) / float64(allowed)
			assert.GreaterOrEqual(t, share, 0.01)
			assert.LessOrEqual(t, share, 0.03)
			assert.Less(t, float64(len(evs)-allowed)/float64(len(evs)), 0.02, "denials are the exception")
		})
		t.Run("mistyped tool", func(t *testing.T) {
			n := 0
			for _, e := range evs {
				if e.Tool == unknownTool {
					n++
					assert.Equal(t, audit.Denied, e.Decision)
					assert.Equal(t, ruleDefaultDeny, e.Rule)
				}
			}
			assert.GreaterOrEqual(t, n, 1)
			assert.LessOrEqual(t, n, 4)
		})
		t.Run("rare destructive calls", func(t *testing.T) {
			n := 0
			for _, e := range evs {
				if s := tools[e.Tool]; s.cat == catDestructive && e.Decision == audit.Allowed {
					n++
				}
			}
			assert.GreaterOrEqual(t, n, 2)
			assert.LessOrEqual(t, n, 14)
		})
		t.Run("exec then status polling", func(t *testing.T) {
			var normal, runaway []run
			for _, r := range runs(evs, 3) {
				if r.start.Tool != "vm_agent_exec" || r.tool() != "vm_agent_exec_status" {
					continue
				}
				for _, c := range r.calls {
					require.Equal(t, r.calls[0].ArgKeys, c.ArgKeys)
				}
				assert.Equal(t, []string{"node", "pid", "vmid"}, r.calls[0].ArgKeys)
				assert.Less(t, r.cv(), 0.1, "regular intervals")
				for _, d := range r.intervals {
					assert.Greater(t, d, time.Second)
					assert.Less(t, d, 6*time.Second)
				}
				if len(r.calls) >= 100 {
					runaway = append(runaway, r)
				} else {
					normal = append(normal, r)
					assert.LessOrEqual(t, len(r.calls), 15)
				}
			}
			assert.Greater(t, len(normal), 200)
			polls := make([]int, len(normal))
			for i, r := range normal {
				polls[i] = len(r.calls)
			}
			slices.Sort(polls)
			assert.GreaterOrEqual(t, polls[len(polls)/2], 5)
			assert.LessOrEqual(t, polls[len(polls)/2], 10)
			assert.GreaterOrEqual(t, len(runaway), 2, "a few runaway loops per week")
			assert.LessOrEqual(t, len(runaway), 12)
		})
		t.Run("clone then task polling", func(t *testing.T) {
			n := 0
			for _, r := range runs(evs, 3) {
				if r.start.Tool == "clone_vm" && r.tool() == "get_task_status" {
					n++
					assert.Equal(t, []string{"node", "upid"}, r.calls[0].ArgKeys)
				}
			}
			assert.Positive(t, n)
		})
		t.Run("retry storms", func(t *testing.T) {
			n := 0
			for _, r := range runs(evs, 5) {
				if r.errors() == len(r.calls) {
					n++
					assert.Equal(t, "start_vm", r.tool())
				}
			}
			assert.GreaterOrEqual(t, n, 1)
			assert.LessOrEqual(t, n, 8)
		})
		t.Run("enumeration is not polling", func(t *testing.T) {
			found := false
			for _, s := range bySession(evs) {
				vmids := map[string]bool{}
				for _, e := range s {
					if e.Tool == "get_vm_status" {
						vmids[e.ArgsHash] = true
					}
				}
				if len(vmids) >= 40 {
					found = true
					for _, r := range runs(s, 3) {
						assert.NotEqual(t, "get_vm_status", r.tool())
					}
				}
			}
			assert.True(t, found, "a session enumerates get_vm_status over many vmids")
		})
		t.Run("diurnal", func(t *testing.T) {
			work, night := 0, 0
			for _, e := range evs {
				if e.Grant == grantDash {
					continue // dashboards never sleep
				}
				wd, h := e.TS.Weekday(), e.TS.Hour()
				switch {
				case wd != time.Saturday && wd != time.Sunday && h >= 9 && h < 17:
					work++
				case h < 6:
					night++
				}
			}
			assert.Greater(t, work, 5*night)
		})
	}
}

func TestSmallIsSmall(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		now := testNow.Add(time.Duration(seed) * 17 * time.Hour) // any day of the week
		_, st := collect(t, Options{Scenario: "small", Seed: seed, Now: now})
		t.Logf("seed %d: %d events", seed, st.Events)
		assert.GreaterOrEqual(t, st.Events, 100, "seed %d", seed)
		assert.LessOrEqual(t, st.Events, 1000, "seed %d", seed)
	}
}
