package report

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// The charts below are drawn as SVG by hand: matrices whose cells carry
// their values in a <title> (shown on hover), and rows with scales of their
// own. Every name goes through esc (control characters made visible, then
// XML's special characters), in text and titles alike.

const svgFont = `font-family:'Roboto Medium',sans-serif`

// svgDoc collects an SVG document's elements.
type svgDoc struct {
	b             strings.Builder
	width, height int
}

func newSVG(width, height int) *svgDoc {
	d := &svgDoc{width: width, height: height}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d">`, width, height, width, height)
	fmt.Fprintf(&d.b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, width, height)
	return d
}

func (d *svgDoc) bytes() []byte {
	d.b.WriteString("</svg>")
	return []byte(d.b.String())
}

// text writes escaped text; anchor is start, middle or end.
func (d *svgDoc) text(x, y float64, size float64, anchor, color, s string, extra ...string) {
	fmt.Fprintf(&d.b, `<text x="%s" y="%s" text-anchor="%s" style="fill:%s;font-size:%spx;%s"%s>%s</text>`,
		f1(x), f1(y), anchor, color, f1(size), svgFont, strings.Join(extra, ""), esc(s))
}

// rect writes a rectangle with an optional hover title.
func (d *svgDoc) rect(x, y, w, h float64, fill, stroke, title string, class string) {
	fmt.Fprintf(&d.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"`, f1(x), f1(y), f1(w), f1(h), fill)
	if stroke != "" {
		fmt.Fprintf(&d.b, ` stroke="%s" stroke-width="1"`, stroke)
	}
	if class != "" {
		fmt.Fprintf(&d.b, ` class="%s"`, class)
	}
	if title == "" {
		d.b.WriteString("/>")
		return
	}
	fmt.Fprintf(&d.b, "><title>%s</title></rect>", esc(title))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, color string, width float64, dash string) {
	fmt.Fprintf(&d.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"`, f1(x1), f1(y1), f1(x2), f1(y2), color, f1(width))
	if dash != "" {
		fmt.Fprintf(&d.b, ` stroke-dasharray="%s"`, dash)
	}
	d.b.WriteString("/>")
}

// f1 writes a coordinate with at most one decimal.
func f1(f float64) string { return trim(math.Round(f*10) / 10) }

// shade is the colour of a share in [0, 1] on the sequential blue scale
// from light to dark; no calls at all are drawn apart (white).
func shade(share float64) string {
	share = math.Max(0, math.Min(1, share))
	lo := [3]float64{0xde, 0xeb, 0xf7}
	hi := [3]float64{0x08, 0x30, 0x6b}
	var c [3]int
	for i := range c {
		c[i] = int(math.Round(lo[i] + (hi[i]-lo[i])*share))
	}
	return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])
}

// shadeSteps is how many distinct shades the matrices use: few enough to
// tell apart, so that a cell's shade reads as a level.
const shadeSteps = 6

// stepShade maps a share in (0, 1] to one of shadeSteps shades, the lowest
// for the smallest non-zero share.
func stepShade(share float64) string {
	step := math.Ceil(share*shadeSteps) - 1
	step = math.Max(0, math.Min(shadeSteps-1, step))
	return shade(step / (shadeSteps - 1))
}

// inkOn is the text colour that reads on a background of the given share.
func inkOn(share float64) string {
	if math.Ceil(share*shadeSteps) > shadeSteps/2 {
		return "#ffffff"
	}
	return "#1f2328"
}

// labelWidth estimates the width of a label at a font size, for layout.
func labelWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * 0.56
}

// shorten cuts a label to at most n runes, with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// heatmapSVG draws calls per tool (rows) and UTC hour of the day
// (columns), each row shaded against its own busiest hour, so that a quiet
// tool's rhythm shows as clearly as a busy one's. Every cell's count is in
// its <title>.
func heatmapSVG(m HourMatrix) []byte {
	const (
		rowH, top, size = 26.0, 28.0, 11.0
		right           = 150.0
	)
	labels := make([]string, len(m.Tools))
	left := 80.0
	for i, t := range m.Tools {
		labels[i] = shorten(t, 40)
		left = math.Max(left, labelWidth(labels[i], size)+16)
	}
	left = math.Min(left, 300)
	cellW := (float64(chartWidth) - left - right) / 24
	height := int(top + rowH*float64(len(m.Tools)) + 78)
	d := newSVG(chartWidth, height)
	d.text(left, 16, 10, "start", "#59636e", "each row shaded against its own busiest hour; hover a cell for its count")
	d.text(float64(chartWidth)-8, 16, 10, "end", "#59636e", "busiest hour · calls")
	for i, tool := range m.Tools {
		row := m.Counts[i]
		var peak, total int64
		for _, v := range row {
			peak = max(peak, v)
			total += v
		}
		y := top + rowH*float64(i)
		d.text(left-8, y+rowH/2+4, size, "end", "#333333", labels[i])
		for h, v := range row {
			x := left + cellW*float64(h)
			title := fmt.Sprintf("%s, %02d:00–%02d:00 UTC: %s", tool, h, (h+1)%24, plural(v, "call", "calls"))
			if v == 0 || peak == 0 {
				d.rect(x+1, y+1, cellW-2, rowH-2, "#ffffff", "#e6eaef", title, "cell")
				continue
			}
			share := float64(v) / float64(peak)
			title += fmt.Sprintf(" (%s of its busiest hour)", pct(math.Round(share*1000)/1000))
			d.rect(x+1, y+1, cellW-2, rowH-2, stepShade(share), "", title, "cell")
		}
		d.text(float64(chartWidth)-8, y+rowH/2+4, 10.5, "end", "#333333", fmt.Sprintf("%s · %s", num(peak), num(total)))
	}
	base := top + rowH*float64(len(m.Tools))
	for h := 0; h < 24; h += 2 {
		d.text(left+cellW*(float64(h)+0.5), base+14, 9.5, "middle", "#333333", fmt.Sprintf("%02d", h))
	}
	d.text(left+cellW*12, base+30, 10, "middle", "#333333", "hour of the day (UTC)")
	// Legend: the shades as shares of the row's busiest hour.
	lx, ly := left, base+44
	d.text(lx, ly+12, 10, "start", "#333333", "share of the busiest hour:")
	lx += 150
	for s := 1; s <= shadeSteps; s++ {
		share := float64(s) / shadeSteps
		d.rect(lx, ly+1, 16, 14, stepShade(share), "", "", "")
		d.text(lx+20, ly+12, 9.5, "start", "#333333", fmt.Sprintf("≤ %d%%", int(math.Round(share*100))))
		lx += 66
	}
	d.rect(lx, ly+1, 16, 14, "#ffffff", "#e6eaef", "", "")
	d.text(lx+20, ly+12, 9.5, "start", "#333333", "none")
	return d.bytes()
}

// agentToolSVG draws the agent × tool matrix: tools as rows, agents as
// columns, each cell shaded on a logarithmic scale of its calls (so that a
// handful of calls still shows beside thousands) and labelled with its
// count; a red corner marks cells with refused calls. The exact numbers
// are in each cell's <title>.
func agentToolSVG(m AgentToolMatrix) []byte {
	const (
		rowH, size = 22.0, 10.5
	)
	left := 80.0
	tools := make([]string, len(m.Tools))
	for j, t := range m.Tools {
		tools[j] = shorten(t, 40)
		left = math.Max(left, labelWidth(tools[j], size)+16)
	}
	left = math.Min(left, 300)
	colW := math.Min(140, (float64(chartWidth)-left-16)/float64(max(len(m.Agents), 1)))
	agents := make([]string, len(m.Agents))
	var longest float64
	for i, a := range m.Agents {
		agents[i] = shorten(a, 28)
		longest = math.Max(longest, labelWidth(agents[i], size))
	}
	rotate := longest > colW-6
	top := 30.0
	if rotate {
		top = math.Min(longest, 170)*0.71 + 24
	}
	var peak int64
	for i := range m.Calls {
		for _, v := range m.Calls[i] {
			peak = max(peak, v)
		}
	}
	logPeak := math.Log1p(float64(peak))
	height := int(top + rowH*float64(len(m.Tools)) + 34)
	d := newSVG(chartWidth, height)
	for i, a := range agents {
		x := left + colW*(float64(i)+0.5)
		if rotate {
			d.text(x-4, top-8, size, "start", "#333333", a, fmt.Sprintf(` transform="rotate(-45 %s %s)"`, f1(x-4), f1(top-8)))
		} else {
			d.text(x, top-10, size, "middle", "#333333", a)
		}
	}
	for j, tool := range m.Tools {
		y := top + rowH*float64(j)
		d.text(left-8, y+rowH/2+4, size, "end", "#333333", tools[j])
		for i, agent := range m.Agents {
			x := left + colW*float64(i)
			v, refused := m.Calls[i][j], m.Refused[i][j]
			title := fmt.Sprintf("%s → %s: %s", agent, tool, plural(v, "call", "calls"))
			if refused > 0 {
				title += fmt.Sprintf(", %s refused", num(refused))
			}
			if v == 0 {
				d.rect(x+1, y+1, colW-2, rowH-2, "#ffffff", "#e6eaef", title, "cell")
				continue
			}
			share := math.Log1p(float64(v)) / logPeak
			d.rect(x+1, y+1, colW-2, rowH-2, stepShade(share), "", title, "cell")
			d.text(x+colW/2, y+rowH/2+4, 9.5, "middle", inkOn(share), axisNumber(float64(v)))
			if refused > 0 {
				fmt.Fprintf(&d.b, `<path d="M%s %sh-9v9z" fill="#e45756" class="refused"><title>%s</title></path>`,
					f1(x+colW-1), f1(y+1), esc(title))
			}
		}
	}
	ly := top + rowH*float64(len(m.Tools)) + 12
	d.text(left, ly+10, 10, "start", "#59636e", "darker: more calls (logarithmic scale, darkest "+num(peak)+"); red corner: some calls refused; hover a cell for its numbers")
	return d.bytes()
}

// scopeNoun names a limit scope's values: 1 session, 3 grants.
func scopeNoun(scope string, n int64) string {
	switch scope {
	case "session", "agent":
		return plural(n, scope, scope+"s")
	}
	return plural(n, "grant", "grants")
}

// limitUnit writes a limit's unit: "per minute per session".
func limitUnit(l Limit) string { return fmt.Sprintf("per %s per %s", l.Window, l.Scope) }

// limitsOrder is the limits as the chart and tables show them: those the
// observed peaks come closest to (or exceed) first.
func limitsOrder(ls []LimitPeak) []LimitPeak {
	out := append([]LimitPeak(nil), ls...)
	ratio := func(l LimitPeak) float64 { return l.PeakMax / float64(max(l.Limit.Max, 1)) }
	sort.SliceStable(out, func(i, j int) bool { return ratio(out[i]) > ratio(out[j]) })
	return out
}

// limitsSVG draws each proposed limit against the observed peaks of its
// tool, one row per tool on a scale of its own in the limit's unit: the
// dark bar reaches the 99th percentile of the scope values' peaks, the
// light one the highest peak (red beyond the limit), the black line is the
// proposed limit.
func limitsSVG(ls []LimitPeak) []byte {
	const (
		rowH, top, size = 26.0, 30.0, 10.5
		right           = 290.0
	)
	rows := limitsOrder(ls)
	left := 80.0
	for _, l := range rows {
		left = math.Max(left, labelWidth(shorten(grantLabel(l.Tool, l.Grant), 40), size)+16)
	}
	left = math.Min(left, 300)
	barW := float64(chartWidth) - left - right - 10
	height := int(top + rowH*float64(len(rows)) + 40)
	d := newSVG(chartWidth, height)
	d.text(left, 16, 10, "start", "#59636e", "each row on its own scale, in its limit's unit")
	d.text(float64(chartWidth)-8, 16, 10, "end", "#59636e", "p99 peak · highest peak · proposed limit")
	for i, l := range rows {
		y := top + rowH*float64(i)
		d.text(left-8, y+rowH/2+4, size, "end", "#333333", shorten(grantLabel(l.Tool, l.Grant), 40))
		scale := math.Max(float64(l.Limit.Max), l.PeakMax) * 1.08
		x := func(v float64) float64 { return left + barW*v/scale }
		title := fmt.Sprintf("%s: proposed %s calls %s; peaks of %s: p50 %s, p99 %s, highest %s; %s over the limit, %s beyond it",
			l.Tool, num(int64(l.Limit.Max)), limitUnit(l.Limit), scopeNoun(l.Limit.Scope, l.Scopes), trim(l.PeakP50), trim(l.PeakP99),
			trim(l.PeakMax), scopeNoun(l.Limit.Scope, l.ScopesOver), plural(l.CallsOver, "call", "calls"))
		d.rect(left, y+5, barW, rowH-10, "#f6f8fa", "", title, "")
		limit := float64(l.Limit.Max)
		d.rect(left, y+7, x(math.Min(l.PeakMax, limit))-left, rowH-14, "#c6dbef", "", title, "")
		if l.PeakMax > limit {
			d.rect(x(limit), y+7, x(l.PeakMax)-x(limit), rowH-14, "#e45756", "", title, "over")
		}
		d.rect(left, y+10, x(math.Min(l.PeakP99, limit))-left, rowH-20, "#4c78a8", "", title, "")
		if l.PeakP99 > limit {
			d.rect(x(limit), y+10, x(l.PeakP99)-x(limit), rowH-20, "#a32b2a", "", title, "")
		}
		d.line(x(limit), y+3, x(limit), y+rowH-3, "#1f2328", 2, "")
		color := "#333333"
		if l.PeakMax > limit {
			color = "#c62828"
		}
		d.text(float64(chartWidth)-8, y+rowH/2+4, size, "end", color,
			fmt.Sprintf("%s · %s · %s %s", trim(l.PeakP99), trim(l.PeakMax), num(int64(l.Limit.Max)), limitUnit(l.Limit)))
	}
	ly := top + rowH*float64(len(rows)) + 12
	lx := left
	for _, k := range []struct{ fill, label string }{{"#4c78a8", "p99 of the peaks"}, {"#c6dbef", "highest peak"}, {"#e45756", "beyond the proposed limit"}} {
		d.rect(lx, ly+2, 16, 12, k.fill, "", "", "")
		d.text(lx+22, ly+12, 10, "start", "#333333", k.label)
		lx += 40 + labelWidth(k.label, 10)
	}
	d.line(lx, ly, lx, ly+16, "#1f2328", 2, "")
	d.text(lx+8, ly+12, 10, "start", "#333333", "proposed limit")
	return d.bytes()
}
