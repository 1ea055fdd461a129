package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/render"
)

// Formats are the backtest's output formats.
var Formats = []string{"text", "json", "markdown"}

// ParseFormat checks a --format value ("" is text).
func ParseFormat(s string) (string, error) { return render.Choice(s, Formats) }

// Write renders a backtest in format f.
func Write(w io.Writer, r *Result, f string) error {
	switch f {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "markdown":
		return writeMarkdown(w, r)
	default:
		return writeText(w, r)
	}
}

// scope names what a backtest covers.
func (r *Result) scope() string {
	if r.Grant == "" {
		return "all grants"
	}
	return "grant " + r.Grant
}

// Headline is one sentence on the latest fold, for reports.
func (r *Result) Headline() string {
	return fmt.Sprintf("trained on %s and replayed on the %s that followed, over %d fold(s)",
		days(r.TrainDays), days(r.TestDays), len(r.Folds))
}

func days(d float64) string {
	if d == float64(int(d)) {
		return fmt.Sprintf("%dd", int(d))
	}
	return fmt.Sprintf("%.1fd", d)
}

// pct renders a rate as a percentage, "n/a" when undefined.
func pct(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", *r*100)
}

// causes renders a tool's causes as "8 denied (default deny), 3 rate_limited by /tools/t/limits/c".
func (tu ToolUnder) causes() string {
	parts := make([]string, len(tu.Causes))
	for i, c := range tu.Causes {
		switch {
		case c.Rule == policy.RuleHidden:
			parts[i] = fmt.Sprintf("%d %s", c.Calls, c.Decision)
		case strings.HasPrefix(c.Rule, "("):
			parts[i] = fmt.Sprintf("%d %s %s", c.Calls, c.Decision, c.Rule)
		default:
			parts[i] = fmt.Sprintf("%d %s by %s", c.Calls, c.Decision, c.Rule)
		}
	}
	return strings.Join(parts, ", ")
}

// spread renders a metric as "mean (min–max)", rates as percentages.
func (m Metric) spread() string {
	if strings.HasSuffix(m.Name, "_rate") {
		return fmt.Sprintf("%.2f%% (%.2f–%.2f%%)", m.Mean*100, m.Min*100, m.Max*100)
	}
	return fmt.Sprintf("%s (%s–%s)", render.Value(m.Mean), render.Value(m.Min), render.Value(m.Max))
}

const stamp = "2006-01-02 15:04"
