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
	colorOK   = charts.ColorFromHex("#4c78a8")
	colorOver = charts.ColorFromHex("#e45756")
	colorText = charts.ColorFromHex("#333333")
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
	if err := add(topToolsChart(r)); err != nil {
		return nil, err
	}
	if err := add(heatmapChart(r)); err != nil {
		return nil, err
	}
	for _, pl := range r.Polling {
		if err := add(pollsChart(pl)); err != nil {
			return nil, err
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
	labels := make([]string, len(rows))
	for i, b := range rows {
		if r.Volume.Bucket == "hour" {
			labels[i] = b.Start.Format("02 15h")
		} else {
			labels[i] = b.Start.Format("Mon 02 Jan")
		}
	}
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
	values := make([][]float64, len(m.Tools))
	for i := range m.Tools {
		values[i] = make([]float64, 24)
		for h := range 24 {
			values[i][h] = float64(m.Counts[i][h])
			if m.Counts[i][h] == 0 {
				values[i][h] = charts.GetNullValue() // no cell: an hour without calls stays white
			}
		}
	}
	// Every other hour is labelled: 24 labels crowd the axis.
	hours := make([]string, 24)
	for h := 0; h < 24; h += 2 {
		hours[h] = fmt.Sprintf("%02d", h)
	}
	opt := charts.NewHeatMapOptionWithData(values)
	opt.Theme = theme(charts.ColorFromHex("#3b7dc4"))
	opt.Padding = charts.NewBox(10, 10, 20, 10)
	opt.XAxis = charts.HeatMapAxis{Title: "hour of the day (UTC)", TitleFontStyle: fontSize(10), Labels: hours, LabelFontStyle: fontSize(9.5), LabelCount: 24}
	tools := make([]string, len(m.Tools))
	for i, t := range m.Tools {
		tools[i] = render.Terminal(t)
	}
	opt.YAxis = charts.HeatMapAxis{Labels: tools, LabelFontStyle: fontSize(10), LabelCount: len(m.Tools)}
	zero := 0.0
	opt.ScaleMinValue = &zero
	opt.ValuesLabel = charts.SeriesLabel{Show: charts.Ptr(false)}
	svg, err := svgChart(chartWidth, 80+34*len(m.Tools), func(p *charts.Painter) error { return p.HeatMapChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: heatmap: %w", err)
	}
	return &Chart{File: "hour-by-tool.svg", Title: "When each tool is called (hour of the day, UTC)",
		Alt: fmt.Sprintf("Heatmap of calls per UTC hour of the day for the %d busiest tools; darker is busier", len(m.Tools)), SVG: svg}, nil
}

// pollBin is one bar of the polls-per-loop histogram: loops with lo to hi
// polls, split at the proposed limit.
type pollBin struct {
	lo, hi       int64 // inclusive
	within, over int64
}

// pollBins groups a loop-length histogram for display: one bar per poll
// count over the loops the limit lets finish (at most 40 bars), one bar for
// the rest of the way up to the limit, then bars of doubling width for the
// loops beyond it. Without a limit, the runaway threshold splits instead.
func pollBins(pl PollingLoop) []pollBin {
	h := pl.Histogram
	if len(h) == 0 {
		return nil
	}
	lo, hi := h[0].Polls, h[len(h)-1].Polls
	split := int64(math.Floor(pl.RunawayThreshold))
	limit := int64(math.MaxInt64)
	if pl.Limit != nil {
		limit = int64(pl.Limit.Max)
		split = limit
	}
	if split < lo {
		split = hi
	}
	// The last poll count at or under the split that some loop has.
	top := lo
	for _, pc := range h {
		if pc.Polls <= split {
			top = pc.Polls
		}
	}
	top = min(top, lo+39)
	var bins []pollBin
	for p := lo; p <= top; p++ {
		bins = append(bins, pollBin{lo: p, hi: p})
	}
	// The stretch up to the limit, empty or not, shows the headroom.
	if top < split && (split < hi || pl.Limit != nil) {
		bins = append(bins, pollBin{lo: top + 1, hi: split})
	}
	next := bins[len(bins)-1].hi + 1
	for w := max(next-1, 1); next <= hi; w *= 2 {
		bins = append(bins, pollBin{lo: next, hi: next + w - 1})
		next += w
	}
	for _, pc := range h {
		for i := range bins {
			if pc.Polls >= bins[i].lo && pc.Polls <= bins[i].hi {
				if pc.Polls > limit {
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

func pollsChart(pl PollingLoop) (*Chart, error) {
	bins := pollBins(pl)
	if len(bins) == 0 {
		return nil, nil
	}
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
	names := []string{"loops"}
	colors := []charts.Color{colorOK}
	if l := pl.Limit; l != nil {
		names[0] = fmt.Sprintf("≤ %d polls: within the proposed limit (%d per %s per %s)", l.Max, l.Max, l.Window, l.Scope)
		if anyOver {
			values = append(values, over)
			names = append(names, fmt.Sprintf("> %d polls: cut", l.Max))
			colors = append(colors, colorOver)
		}
	}
	opt := stackedBars(values, labels, names, colors, "loops")
	opt.CategoryAxis.Title = "polls per loop"
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
	svg, err := svgChart(chartWidth, 340, func(p *charts.Painter) error { return p.BarChart(opt) })
	if err != nil {
		return nil, fmt.Errorf("report: polls per loop chart of %s: %w", pl.Tool, err)
	}
	alt := render.Terminal(fmt.Sprintf("Histogram of polls per loop of %s after %s", pl.Tool, pl.StartTool))
	if pl.Limit != nil {
		alt += fmt.Sprintf("; loops with more than %d polls, in red, exceed the proposed limit", pl.Limit.Max)
	}
	return &Chart{File: "polls-" + fileSafe(pl.Tool) + ".svg", Title: render.Terminal(fmt.Sprintf("Polls per loop: %s after %s", pl.Tool, pl.StartTool)),
		Alt: alt, SVG: svg}, nil
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
