package policy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// interceptConfig mirrors Intercept's policy schema (internal/config, snapshot 77f0429).
type interceptConfig struct {
	Version string                   `yaml:"version"`
	Default string                   `yaml:"default"`
	Hide    []string                 `yaml:"hide"`
	Tools   map[string]interceptTool `yaml:"tools"`
}

type interceptTool struct {
	Rules []interceptRule `yaml:"rules"`
}

type interceptRule struct {
	Name       string           `yaml:"name"`
	Action     string           `yaml:"action"`
	RateLimit  string           `yaml:"rate_limit"`
	Conditions []map[string]any `yaml:"conditions"`
	OnDeny     string           `yaml:"on_deny"`
}

// checkIntercept applies the structural rules of Intercept's validator.
func checkIntercept(t *testing.T, out []byte) interceptConfig {
	t.Helper()
	var cfg interceptConfig
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&cfg), "%s", out)
	assert.Equal(t, "1", cfg.Version)
	for tool, td := range cfg.Tools {
		windows := map[string]bool{}
		for i, r := range td.Rules {
			where := fmt.Sprintf("tools.%s.rules[%d]", tool, i)
			assert.NotEmpty(t, r.Name, where)
			switch {
			case r.RateLimit != "":
				assert.Empty(t, r.Conditions, where)
				assert.NotEqual(t, "deny", r.Action, where)
				var n int
				var w string
				_, err := fmt.Sscanf(r.RateLimit, "%d/%s", &n, &w)
				require.NoError(t, err, where)
				assert.False(t, windows[w], "%s: one _rate_%s counter per tool", where, w)
				windows[w] = true
			case r.Action == "deny":
				assert.Empty(t, r.Conditions, where)
			default:
				assert.Contains(t, []string{"", "evaluate"}, r.Action, where)
				assert.NotEmpty(t, r.Conditions, "%s: evaluate needs conditions", where)
			}
		}
	}
	return cfg
}

func TestInterceptGolden(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "intercept.json")))
	out, err := Intercept(p)
	require.NoError(t, err)
	golden(t, "intercept.golden.yaml", out)
	cfg := checkIntercept(t, out)
	assert.Equal(t, []string{"delete_storage_volume", "drop_all"}, cfg.Hide)
	assert.Equal(t, "deny", cfg.Default)

	again, err := Intercept(p.Clone())
	require.NoError(t, err)
	assert.Equal(t, string(out), string(again), "deterministic")
}

func TestInterceptExamples(t *testing.T) {
	for _, name := range []string{"spec.json", "stripe.json", "approval.json", "permissive.json", "lenient.json"} {
		t.Run(name, func(t *testing.T) {
			out, err := Intercept(mustParse(t, string(readTestdata(t, name))))
			require.NoError(t, err)
			checkIntercept(t, out)
		})
	}

	out, err := Intercept(mustParse(t, string(readTestdata(t, "spec.json"))))
	require.NoError(t, err)
	s := string(out)
	assert.Contains(t, s, "  \"*\":\n    rules:\n      # all_tools: counts every tool's calls together (Intercept's _global counter).\n      - name: calls-per-minute\n        rate_limit: \"240/minute\"\n")
	assert.Contains(t, s, "  get_vm_status:\n    rules: []\n")
	assert.Contains(t, s, "      - name: require approval\n        action: deny\n        on_deny: Requires human approval.\n")
	assert.Contains(t, s, "supports action: require_approval")
	assert.Contains(t, s, "Approximated: vm_agent_exec_status_rate counts per session in policy.json; Intercept counters are global")
	assert.Contains(t, s, "rate_limit: \"20/minute\"")

	_, err = Intercept(nil)
	assert.Error(t, err)
}
