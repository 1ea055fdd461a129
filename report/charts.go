package report

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/go-analyze/charts"

	"github.com/mcptrail/mcptrail/render"
)

// Chart is one chart of a report, rendered as SVG on the server.
type Chart struct {
	// File is the chart's file name beside the Markdown report.
	File string
	// Title heads the chart; Alt describes it in words.
	Title string
	Alt   string
	SVG   []byte
}

// Decision colours, the same in every chart: calm for allowed, warm for the
// refusals, red for denials.
var decisionColors = map[string]charts.Color{
	"allowed":           charts.ColorFromHex("#4c78a8"),
	"denied":            charts.ColorFromHex("#e45756"),
	"hidden":            charts.ColorFromHex("#8c8c8c"),
	"rate_limited":      charts.ColorFromHex("#f58518"),
	"approval_required": charts.ColorFromHex("#b279a2"),
}

var (
	colorOK    = charts.ColorFromHex("#4c78a8")
	colorOver  = charts.ColorFromHex("#e45756")
	colorText  = charts.ColorFromHex("#333333")
	colorError = charts.ColorFromHex("#9d755d")
)

const chartWidth = 960

func theme(series ...charts.Color) charts.ColorPalette {
	t := charts.GetTheme(charts.ThemeLight).WithTextColor(colorText)
	if len(series) > 0 {
		t = t.WithSeriesColors(series)
	}
	return t
}

// Charts renders the report's charts: calls over time by decision, the top
// tools, the hour-of-day × tool heatmap and, for each polling loop, the
// distribution of polls per loop with the proposed limit marked. Charts
// without data are left out. The same report gives the same bytes.
func Charts(r *Report) ([]Chart, error) {
	var out []Chart
	add := func(c *Chart, err error) error {
		if err != nil {
			return err
		}
		if c != nil {
			out = append(out, *c)
		}
		return nil
	}
	if err := add(volumeChart(r)); err != nil {
		return nil, err
	}
	if err := add(refusalsChart(r)); err != nil {
		return nil, err
	}
	if err := add(errorsChart(r)); err != nil {
		return nil, err
	}
	if err := add(topToolsChart(r)); err != nil {
		return nil, err
	}
	if err := add(heatmapChart(r)); err != nil {
		return nil, err
	}
	if err := add(agentToolChart(r)); err != nil {
		return nil, err
	}
	if err := add(limitsChart(r)); err != nil {
		return nil, err
	}
	for _, pl := range r.Polling {
		if err := add(pollsChart(pl)); err != nil {
			return nil, err
		}
		if l := limitOf(r, pl.Grant, pl.Tool); l != nil && pl.Limit != nil {
			if err := add(limitChart(*l)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func svgChart(width, height int, draw func(p *charts.Painter) error) ([]byte, error) {
	p := charts.NewPainter(charts.PainterOptions{OutputFormat: charts.ChartOutputSVG, Width: width, Height: height, Theme: theme()})
	if err := draw(p); err != nil {
		return nil, err
	}
	b, err := p.Bytes()
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b), nil
}

func fontSize(n float64) charts.FontStyle {
	return charts.FontStyle{FontSize: n, FontColor: colorText}
}

var decisionOrder = []string{"allowed", "denied", "hidden", "rate_limited", "approval_required"}

func decisionValue(b Bucket, d string) int64 {
	switch d {
	case "allowed":
		return b.Allowed
	case "denied":
		return b.Denied
	case "hidden":
		return b.Hidden
	case "rate_limited":
		return b.RateLimited
	}
	return b.ApprovalRequired
}

func volumeChart(r *Report) (*Chart, error) {
	rows := r.Volume.Rows
	if len(rows) == 0 {
		return nil, nil
	}
	labels := volumeLabels(r)
	var values [][]float64
	var names []string
	var colors []charts.Color
	for _, d := range decisionOrder {
		var total int64
		vals := make([]float64, len(rows))
		for i, b := range rows {
			v := decisionValue(b, d)
			total += v
			vals[i] = float64(v)
		}
		if total == 0 && d != "allowed" {
			continue
		}
		values = append(values, vals)
		names = append(names, strings.ReplaceAll(d, "_", " "))
		colors = append(colors, decisionColors[d])
	}
	opt := stackedBars(values, labels, names, colors, "calls")
	if len(labels) > 12 {
		opt.CategoryAxis.LabelCount = 12
	}
	opt.BarSize = 0.6
	svg, err := svgChart(chartWidth, 340, func(p *charts.Painter) error { return p.BarChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: calls over time chart: %w", err)
	}
	return &Chart{File: "calls-over-time.svg", Title: "Calls over time by decision",
		Alt: fmt.Sprintf("Stacked bars of %s calls per %s (UTC) by the gateway's decision", num(r.Totals.Calls), r.Volume.Bucket), SVG: svg}, nil
}

// stackedBars is the stacked bar chart both histograms start from: one
// series per name in its colour, labelled categories, the legend on the
// right, a value axis in unit.
func stackedBars(values [][]float64, labels, names []string, colors []charts.Color, unit string) charts.BarChartOption {
	opt := charts.NewBarChartOptionWithData(values)
	opt.Theme = theme(colors...)
	opt.StackSeries = charts.Ptr(true)
	opt.Padding = charts.NewBox(10, 10, 20, 10)
	opt.CategoryAxis.Labels = labels
	opt.CategoryAxis.LabelFontStyle = fontSize(9.5)
	opt.ValueAxis = []charts.ValueAxisOption{valueAxis(unit)}
	opt.Legend = charts.LegendOption{SeriesNames: names, Offset: charts.OffsetRight, FontStyle: fontSize(10)}
	return opt
}

func topToolsChart(r *Report) (*Chart, error) {
	tools := r.Tools
	if len(tools) == 0 {
		return nil, nil
	}
	n := min(len(tools), DefaultTopN)
	// Horizontal bars run bottom-up: the busiest tool goes last, on top.
	labels := make([]string, n)
	allowed := make([]float64, n)
	refused := make([]float64, n)
	var anyRefused bool
	for i := range n {
		t := tools[n-1-i]
		labels[i] = render.Terminal(t.Tool)
		allowed[i] = float64(t.Allowed)
		refused[i] = float64(t.Refused)
		anyRefused = anyRefused || t.Refused > 0
	}
	values := [][]float64{allowed}
	names := []string{"allowed"}
	colors := []charts.Color{decisionColors["allowed"]}
	if anyRefused {
		values = append(values, refused)
		names = append(names, "refused (denied, hidden, rate-limited, held)")
		colors = append(colors, decisionColors["denied"])
	}
	opt := charts.NewBarChartOptionWithData(values)
	opt.Horizontal = true
	opt.Theme = theme(colors...)
	opt.StackSeries = charts.Ptr(true)
	opt.Padding = charts.NewBox(10, 10, 30, 10)
	opt.CategoryAxis.Labels = labels
	opt.CategoryAxis.LabelFontStyle = fontSize(10)
	opt.ValueAxis = []charts.ValueAxisOption{valueAxis("")}
	opt.Legend = charts.LegendOption{SeriesNames: names, Offset: charts.OffsetRight, FontStyle: fontSize(10)}
	opt.BarSize = 0.7
	svg, err := svgChart(chartWidth, 90+32*n, func(p *charts.Painter) error { return p.BarChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: top tools chart: %w", err)
	}
	return &Chart{File: "top-tools.svg", Title: "Top tools",
		Alt: fmt.Sprintf("Horizontal bars of the %d busiest tools' calls, allowed and refused", n), SVG: svg}, nil
}

func heatmapChart(r *Report) (*Chart, error) {
	m := r.HourByTool
	if len(m.Tools) == 0 {
		return nil, nil
	}
	return &Chart{File: "hour-by-tool.svg", Title: "When each tool is called (hour of the day, UTC)",
		Alt: fmt.Sprintf("Heatmap of calls per UTC hour of the day for the %d busiest tools; each row is shaded against its own busiest hour", len(m.Tools)),
		SVG: heatmapSVG(m)}, nil
}

// pollBin is one bar of a histogram: counts of lo to hi (polls per loop,
// or peak calls per window), split at a threshold.
type pollBin struct {
	lo, hi       int64 // inclusive
	within, over int64
}

// histBins groups a histogram (values with their counts, ascending) for
// display, split at split (within: at most split; over: more): one bar per
// value up to the split (at most 40 bars), then, when headroom is set (a
// limit), one bar for the rest of the way up to it, then bars of doubling
// width beyond it. A limit more than 24 above the lowest value gets 16
// bars of equal width up to it instead. A split under every value splits nothing.
func histBins(h []PollCount, split int64, headroom bool) []pollBin {
	if len(h) == 0 {
		return nil
	}
	lo, hi := h[0].Polls, h[len(h)-1].Polls
	over := split
	if split < lo {
		split = hi
		if !headroom {
			over = hi
		}
	}
	// The last value at or under the split that has a count.
	top := lo
	for _, pc := range h {
		if pc.Polls <= split {
			top = pc.Polls
		}
	}
	top = min(top, lo+39)
	var bins []pollBin
	if span := split - lo + 1; headroom && span > 24 {
		// A wide way up to a limit: 16 bars of equal width end at it.
		w := (span + 15) / 16
		for p := split; p >= lo; p -= w {
			bins = append([]pollBin{{lo: max(p-w+1, lo), hi: p}}, bins...)
		}
	} else {
		for p := lo; p <= top; p++ {
			bins = append(bins, pollBin{lo: p, hi: p})
		}
		// The stretch up to the limit, empty or not, shows the headroom.
		if top < split && (split < hi || headroom) {
			bins = append(bins, pollBin{lo: top + 1, hi: split})
		}
	}
	next := bins[len(bins)-1].hi + 1
	for w := max(next-1, 1); next <= hi; w *= 2 {
		bins = append(bins, pollBin{lo: next, hi: next + w - 1})
		next += w
	}
	for _, pc := range h {
		for i := range bins {
			if pc.Polls >= bins[i].lo && pc.Polls <= bins[i].hi {
				if pc.Polls > over {
					bins[i].over += pc.Loops
				} else {
					bins[i].within += pc.Loops
				}
				break
			}
		}
	}
	return bins
}

// binsChart draws histogram bins as bars, the ones over the split in red.
func binsChart(bins []pollBin, names []string, unit, axis string) (charts.BarChartOption, bool) {
	labels := make([]string, len(bins))
	within := make([]float64, len(bins))
	over := make([]float64, len(bins))
	var anyOver bool
	var maxBar float64
	for i, b := range bins {
		labels[i] = fmt.Sprint(b.lo)
		if b.hi > b.lo {
			labels[i] = fmt.Sprintf("%d–%d", b.lo, b.hi)
		}
		within[i], over[i] = float64(b.within), float64(b.over)
		anyOver = anyOver || b.over > 0
		maxBar = max(maxBar, within[i]+over[i])
	}
	values := [][]float64{within}
	colors := []charts.Color{colorOK}
	if anyOver {
		values = append(values, over)
		colors = append(colors, colorOver)
	} else {
		names = names[:1]
	}
	opt := stackedBars(values, labels, names, colors, unit)
	opt.CategoryAxis.Title = axis
	opt.CategoryAxis.TitleFontStyle = fontSize(10)
	// Label the bars too small to read (the formatter sees the series'
	// index and the value, not the bar's).
	for i := range opt.SeriesList {
		opt.SeriesList[i].Label = charts.SeriesLabel{Show: charts.Ptr(true), FontStyle: fontSize(9.5),
			LabelFormatter: func(_ int, _ string, v float64) (string, *charts.LabelStyle) {
				if v > 0 && v < maxBar/15 {
					return num(int64(v)), nil
				}
				return "", nil
			}}
	}
	if len(labels) <= 24 {
		opt.CategoryAxis.LabelCount = len(labels)
	}
	return opt, anyOver
}

// pollsChart is the distribution of polls per loop, the runaway loops (more
// than the runaway threshold) in red. A loop's polls are no limit's unit:
// the proposed limit is drawn against its own unit in limitChart.
func pollsChart(pl PollingLoop) (*Chart, error) {
	split := int64(math.Floor(pl.RunawayThreshold))
	if split <= 0 {
		split = math.MaxInt64
	}
	bins := histBins(pl.Histogram, split, false)
	if len(bins) == 0 {
		return nil, nil
	}
	names := []string{"loops", fmt.Sprintf("runaway loops (more than %d polls)", split)}
	if split != math.MaxInt64 {
		names[0] = fmt.Sprintf("loops of at most %d polls", split)
	}
	opt, anyOver := binsChart(bins, names, "loops", "polls per loop")
	svg, err := svgChart(chartWidth, 340, func(p *charts.Painter) error { return p.BarChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: polls per loop chart of %s: %w", pl.Tool, err)
	}
	alt := render.Terminal(fmt.Sprintf("Histogram of polls per loop of %s after %s", grantLabel(pl.Tool, pl.Grant), pl.StartTool))
	if anyOver {
		alt += fmt.Sprintf("; runaway loops, with more than %d polls, in red", split)
	}
	return &Chart{File: pollFile(pl), Title: render.Terminal(fmt.Sprintf("Polls per loop: %s after %s", grantLabel(pl.Tool, pl.Grant), pl.StartTool)),
		Alt: alt, SVG: svg}, nil
}

// limitChart draws a polled tool against its proposed limit in the limit's
// own unit: the scope values (sessions, grants or agents) by their peak
// calls of the tool in one window, those over the limit in red.
func limitChart(l LimitPeak) (*Chart, error) {
	h := make([]PollCount, len(l.Histogram))
	for i, pc := range l.Histogram {
		h[i] = PollCount{Polls: pc.Peak, Loops: pc.Scopes}
	}
	bins := histBins(h, int64(l.Limit.Max), true)
	if len(bins) == 0 {
		return nil, nil
	}
	scopes := l.Limit.Scope + "s"
	names := []string{fmt.Sprintf("%s within the proposed limit (%d %s)", scopes, l.Limit.Max, limitUnit(l.Limit)),
		fmt.Sprintf("%s over it (more than %d calls in one %s)", scopes, l.Limit.Max, l.Limit.Window)}
	opt, anyOver := binsChart(bins, names, scopes, fmt.Sprintf("peak calls of the tool in one %s per %s", l.Limit.Window, l.Limit.Scope))
	svg, err := svgChart(chartWidth, 340, func(p *charts.Painter) error { return p.BarChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: limit chart of %s: %w", l.Tool, err)
	}
	alt := render.Terminal(fmt.Sprintf("Histogram of the %s by their peak calls of %s %s, against the proposed limit of %d", scopes, grantLabel(l.Tool, l.Grant), limitUnit(l.Limit), l.Limit.Max))
	if anyOver {
		alt += fmt.Sprintf("; the %s over the limit in red", scopes)
	}
	return &Chart{File: limitFile(l.Grant, l.Tool), Title: render.Terminal(fmt.Sprintf("%s against its proposed limit", grantLabel(l.Tool, l.Grant))), Alt: alt, SVG: svg}, nil
}

// grantFile is the part of a chart's file name that names a tool, and the
// grant whose proposal the chart shows ("" for a server without grants).
func grantFile(grant, tool string) string {
	if grant == "" {
		return fileSafe(tool)
	}
	return fileSafe(tool) + "--" + fileSafe(grant)
}

func limitFile(grant, tool string) string { return "limit-" + grantFile(grant, tool) + ".svg" }

func pollFile(pl PollingLoop) string { return "polls-" + grantFile(pl.Grant, pl.Tool) + ".svg" }

// grantLabel names a tool in a chart, with the grant whose proposal the
// chart shows.
func grantLabel(tool, grant string) string {
	if grant == "" {
		return tool
	}
	return tool + " (" + grant + ")"
}

// limitOf is the limit measured for a grant's tool, nil when none is proposed.
func limitOf(r *Report, grant, tool string) *LimitPeak {
	for i := range r.Limits {
		if r.Limits[i].Tool == tool && r.Limits[i].Grant == grant {
			return &r.Limits[i]
		}
	}
	return nil
}

// refusalsChart draws the refused calls over time by decision, on a scale
// of their own: beside the allowed calls a refusal rate of 0.5 % would not
// show. Segments too thin to see carry their count.
func refusalsChart(r *Report) (*Chart, error) {
	if r.Totals.Calls == r.Totals.Allowed {
		return nil, nil
	}
	var names []string
	var colors []charts.Color
	var fns []func(Bucket) int64
	for _, d := range decisionOrder[1:] {
		names = append(names, strings.ReplaceAll(d, "_", " "))
		colors = append(colors, decisionColors[d])
		fns = append(fns, func(b Bucket) int64 { return decisionValue(b, d) })
	}
	svg, err := countsOverTime(r, names, colors, fns)
	if err != nil {
		return nil, fmt.Errorf("report: refusals over time chart: %w", err)
	}
	return &Chart{File: "refusals-over-time.svg", Title: "Refused calls over time",
		Alt: fmt.Sprintf("Stacked bars of the %s calls the gateway refused per %s (UTC), by decision, on their own scale",
			num(r.Totals.Calls-r.Totals.Allowed), r.Volume.Bucket), SVG: svg}, nil
}

// errorsChart draws the allowed calls that failed upstream over time, on a
// scale of their own.
func errorsChart(r *Report) (*Chart, error) {
	if r.Totals.Errors == 0 {
		return nil, nil
	}
	svg, err := countsOverTime(r, []string{"upstream error (allowed call)"}, []charts.Color{colorError},
		[]func(Bucket) int64{func(b Bucket) int64 { return b.Errors }})
	if err != nil {
		return nil, fmt.Errorf("report: errors over time chart: %w", err)
	}
	return &Chart{File: "errors-over-time.svg", Title: "Upstream errors over time",
		Alt: fmt.Sprintf("Bars of the %s allowed calls that failed upstream per %s (UTC), on their own scale", num(r.Totals.Errors), r.Volume.Bucket), SVG: svg}, nil
}

// countsOverTime stacks some counts of every bucket, leaving out series
// without any; a segment too thin to see is labelled with its count.
func countsOverTime(r *Report, names []string, colors []charts.Color, fns []func(Bucket) int64) ([]byte, error) {
	rows := r.Volume.Rows
	var values [][]float64
	var keptNames []string
	var keptColors []charts.Color
	var maxBar float64
	bars := make([]float64, len(rows))
	for k, fn := range fns {
		var total int64
		vals := make([]float64, len(rows))
		for i, b := range rows {
			total += fn(b)
			vals[i] = float64(fn(b))
			bars[i] += vals[i]
			maxBar = max(maxBar, bars[i])
		}
		if total == 0 {
			continue
		}
		values = append(values, vals)
		keptNames = append(keptNames, names[k])
		keptColors = append(keptColors, colors[k])
	}
	opt := stackedBars(values, volumeLabels(r), keptNames, keptColors, "calls")
	if len(rows) > 12 {
		opt.CategoryAxis.LabelCount = 12
	}
	opt.BarSize = 0.6
	if len(values) > 1 {
		for i := range opt.SeriesList {
			opt.SeriesList[i].Label = charts.SeriesLabel{Show: charts.Ptr(true), FontStyle: fontSize(9.5),
				LabelFormatter: func(_ int, _ string, v float64) (string, *charts.LabelStyle) {
					if v > 0 && v < maxBar/12 {
						return num(int64(v)), nil
					}
					return "", nil
				}}
		}
	}
	return svgChart(chartWidth, 270, func(p *charts.Painter) error { return p.BarChart(opt) })
}

func volumeLabels(r *Report) []string {
	labels := make([]string, len(r.Volume.Rows))
	for i, b := range r.Volume.Rows {
		if r.Volume.Bucket == "hour" {
			labels[i] = b.Start.Format("02 15h")
		} else {
			labels[i] = b.Start.Format("Mon 02 Jan")
		}
	}
	return labels
}

func limitsChart(r *Report) (*Chart, error) {
	if len(r.Limits) == 0 {
		return nil, nil
	}
	return &Chart{File: "limits.svg", Title: "Proposed limits against observed peaks",
		Alt: fmt.Sprintf("For each of the %d proposed rate limits, the observed peak calls per window per scope value against the limit, each on its own scale", len(r.Limits)),
		SVG: limitsSVG(r.Limits)}, nil
}

func agentToolChart(r *Report) (*Chart, error) {
	m := r.AgentTools
	if len(m.Agents) == 0 || len(m.Tools) == 0 {
		return nil, nil
	}
	return &Chart{File: "agent-tool.svg", Title: "Which agent calls which tool",
		Alt: fmt.Sprintf("Matrix of the calls of %d agents (columns) to %d tools (rows), darker for more calls on a logarithmic scale; red corners mark refused calls", len(m.Agents), len(m.Tools)),
		SVG: agentToolSVG(m)}, nil
}

// valueAxis is a count axis from zero with a few round labels.
func valueAxis(title string) charts.ValueAxisOption {
	zero := 0.0
	return charts.ValueAxisOption{Min: &zero, PreferNiceIntervals: charts.Ptr(true), LabelCountAdjustment: -2, LabelFontStyle: fontSize(9.5), ValueFormatter: axisNumber,
		Title: title, TitleFontStyle: fontSize(10)}
}

// axisNumber writes an axis value briefly: 500, 4.5k, 12k, 1.2M.
func axisNumber(f float64) string {
	a := math.Abs(f)
	switch {
	case a >= 1e6:
		return trim(math.Round(f/1e5)/10) + "M"
	case a >= 1e3:
		return trim(math.Round(f/1e2)/10) + "k"
	}
	return trim(math.Round(f*10) / 10)
}

// fileSafe keeps letters, digits, '-', '_' and '.' of a name for a file name,
// and no leading dot.
func fileSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	if s := b.String(); s[0] == '.' { // never ".", ".." or hidden
		return "_" + s[1:]
	}
	return b.String()
}
