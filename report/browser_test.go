package report

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium finds Debian's headless-capable Chromium. Without it the test
// skips, except in CI (CI set), where test.sh installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("chromium is not installed (apt-get install chromium); the test runs in CI")
	}
	t.Fatal("chromium is not installed: CI must run it (test.sh installs Debian's chromium package)")
	return ""
}

// runChromium runs headless Chromium on a local file with a fresh profile
// and no network services.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
	return stdout.Bytes()
}

// probe measures every chart as laid out: its box, how many of its shapes
// have an area, how many hover titles it has, and the area on screen (px²)
// painted in each fill colour; the box of the last-accessed table; and the
// per-grant recommendation: the grants table's box and rows, and each
// grant's loosenings table.
const probe = `<pre id="probe"></pre>
<script>
const out = {charts: [], tables: {}};
for (const svg of document.querySelectorAll('svg')) {
  const r = svg.getBoundingClientRect();
  let drawn = 0;
  const fills = {};
  for (const el of svg.querySelectorAll('path, rect, text')) {
    const b = el.getBBox();
    if (b.width > 0 && b.height > 0) drawn++;
    if (el.tagName === 'text') continue;
    const s = el.getBoundingClientRect();
    const f = getComputedStyle(el).fill;
    fills[f] = (fills[f] || 0) + s.width * s.height;
  }
  out.charts.push({chart: svg.getAttribute('data-chart'), width: r.width, height: r.height, drawn: drawn,
    titles: svg.querySelectorAll('title').length, fills: fills});
}
for (const t of document.querySelectorAll('table.access')) {
  const r = t.getBoundingClientRect();
  out.tables.access = {width: r.width, height: r.height, never: t.querySelectorAll('td.never').length,
    recent: t.querySelectorAll('td.recent').length};
}
for (const t of document.querySelectorAll('table.grants')) {
  const r = t.getBoundingClientRect();
  const rows = [];
  for (const tr of t.querySelectorAll('tr[data-grant]')) {
    rows.push({grant: tr.getAttribute('data-grant'), cells: Array.from(tr.querySelectorAll('td'), td => td.textContent)});
  }
  out.grants = {width: r.width, height: r.height, rows: rows, loosenings: {}};
  for (const l of document.querySelectorAll('table.loosenings')) {
    const lr = l.getBoundingClientRect();
    out.grants.loosenings[l.getAttribute('data-grant')] = {rows: l.querySelectorAll('tr').length - 1, width: lr.width, height: lr.height};
  }
}
document.getElementById('probe').textContent = JSON.stringify(out);
</script>
`

// TestHTMLReportInChromium renders the HTML report in a real browser and
// checks that every chart drew, that the page is not blank, and that it
// prints.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromium(t)
	store := proxmoxStore(t)
	importCatalog(t, store, fixedNow.Add(-30*24*time.Hour))
	r, err := Build(context.Background(), store, Options{Server: server, Window: week, Now: fixedNow, GeneratedAt: fixedNow, Recommend: inputs(t, store)})
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = WriteFolder(filepath.Join(dir, "report"), r, []string{"html"})
	require.NoError(t, err)
	page := filepath.Join(dir, "report", HTMLFile)
	html, err := os.ReadFile(page)
	require.NoError(t, err)
	charts := strings.Count(string(html), "<svg ")
	require.Equal(t, 15, charts)

	t.Run("every chart has a size and shapes", func(t *testing.T) {
		probed := filepath.Join(dir, "report", "probe.html")
		require.NoError(t, os.WriteFile(probed, bytes.Replace(html, []byte("</body>"), []byte(probe+"</body>"), 1), 0o644))
		dom := runChromium(t, bin, "--window-size=1280,2000", "--dump-dom", "file://"+probed)
		m := regexp.MustCompile(`(?s)<pre id="probe">(.*?)</pre>`).FindSubmatch(dom)
		require.NotNil(t, m, "the probe ran: %.500s", dom)
		var probed2 struct {
			Charts []struct {
				Chart         string
				Width, Height float64
				Drawn, Titles int
				Fills         map[string]float64
			}
			Tables map[string]struct {
				Width, Height float64
				Never, Recent int
			}
			Grants *struct {
				Width, Height float64
				Rows          []struct {
					Grant string
					Cells []string
				}
				Loosenings map[string]struct {
					Rows          int
					Width, Height float64
				}
			}
		}
		require.NoError(t, json.Unmarshal(bytes.ReplaceAll(m[1], []byte("&amp;"), []byte("&")), &probed2), "%s", m[1])
		boxes := probed2.Charts
		require.Len(t, boxes, charts)
		byName := map[string]int{}
		for i, b := range boxes {
			byName[b.Chart] = i
			assert.Greater(t, b.Width, 600.0, "%s is laid out wide on a laptop screen", b.Chart)
			assert.Greater(t, b.Height, 150.0, b.Chart)
			assert.Greater(t, b.Drawn, 10, "%s drew its shapes", b.Chart)
		}
		for _, name := range []string{"refusals-over-time.svg", "errors-over-time.svg", "agent-tool.svg", "limits.svg", "limit-vm_agent_exec_status--ops-bot.svg"} {
			assert.Contains(t, byName, name)
		}
		// At under 1 % refusals, denials and rate-limited calls are a few
		// pixels in the calls-over-time chart and plainly visible on the
		// refusals chart's own scale.
		denied, limited := "rgb(228, 87, 86)", "rgb(245, 133, 24)"
		calls, refusals := boxes[byName["calls-over-time.svg"]], boxes[byName["refusals-over-time.svg"]]
		for _, c := range []string{denied, limited} {
			assert.Greater(t, refusals.Fills[c], 1000.0, "%s bars are visible on the refusals chart", c)
			assert.Greater(t, refusals.Fills[c], 10*calls.Fills[c], "%s: the refusals chart magnifies", c)
		}
		heat := boxes[byName["hour-by-tool.svg"]]
		assert.Equal(t, 24*len(r.HourByTool.Tools), heat.Titles, "every heatmap cell has its value on hover")
		matrix := boxes[byName["agent-tool.svg"]]
		assert.GreaterOrEqual(t, matrix.Titles, len(r.AgentTools.Agents)*len(r.AgentTools.Tools))
		assert.GreaterOrEqual(t, boxes[byName["limits.svg"]].Titles, 3*len(r.Limits), "every limit row has its numbers on hover")
		assert.Greater(t, boxes[byName["limit-vm_agent_exec_status--ops-bot.svg"]].Fills["rgb(228, 87, 86)"], 50.0, "sessions over the limit drawn in red")
		access, ok := probed2.Tables["access"]
		require.True(t, ok, "the last-accessed table is on the page")
		assert.Greater(t, access.Width, 600.0)
		assert.Greater(t, access.Height, 300.0)
		assert.Positive(t, access.Never, "grants only ever refused a tool are marked")
		assert.Positive(t, access.Recent)

		// The recommendation is per grant: a table row per grant with both
		// sides of its replay, and each widening grant's loosenings shown.
		g := probed2.Grants
		require.NotNil(t, g, "the per-grant table is on the page")
		assert.Greater(t, g.Width, 600.0)
		require.Len(t, g.Rows, len(r.Recommendation.Grants))
		for i, want := range r.Recommendation.Grants {
			row := g.Rows[i]
			assert.Equal(t, want.Grant, row.Grant)
			require.Len(t, row.Cells, 9)
			assert.Equal(t, want.Grant, row.Cells[0])
			assert.Equal(t, num(want.Replay.Changed), row.Cells[7], "%s: allowed then, refused now", want.Grant)
			assert.Equal(t, num(want.Replay.NewlyAllowed), row.Cells[8], "%s: refused then, allowed now", want.Grant)
			if want.Counts.Widen > 0 {
				assert.Contains(t, row.Cells[3], "⚠️", "%s: a widening is marked", want.Grant)
				l, ok := g.Loosenings[want.Grant]
				require.True(t, ok, "%s: its loosenings are listed", want.Grant)
				assert.Equal(t, want.Counts.Widen, l.Rows)
				assert.Greater(t, l.Height, 40.0)
			}
		}
		assert.Contains(t, g.Loosenings, "readonly-dashboard", "the dashboard's raised limits widen access")
	})

	t.Run("the screenshot is not blank", func(t *testing.T) {
		shot := filepath.Join(dir, "screenshot.png")
		// Tall enough for the per-grant recommendation and the first chart.
		runChromium(t, bin, "--window-size=1280,4000", "--screenshot="+shot, "file://"+page)
		f, err := os.Open(shot)
		require.NoError(t, err)
		defer f.Close()
		img, err := png.Decode(f)
		require.NoError(t, err)
		assert.Equal(t, image.Rect(0, 0, 1280, 4000), img.Bounds())
		colours := map[[3]uint32]int{}
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y += 2 {
			for x := b.Min.X; x < b.Max.X; x += 2 {
				r, g, bl, _ := img.At(x, y).RGBA()
				colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
			}
		}
		assert.Greater(t, len(colours), 100, "text, badges and charts give many colours")
		// The calls-over-time chart's allowed bars (#4c78a8) are on screen.
		assert.Greater(t, colours[[3]uint32{0x4c, 0x78, 0xa8}], 2000, "chart bars drawn in the screenshot")
		if keep := os.Getenv("MCPTRAIL_REPORT_SCREENSHOT"); keep != "" {
			data, err := os.ReadFile(shot)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(keep, data, 0o644))
		}
	})

	t.Run("it prints", func(t *testing.T) {
		pdf := filepath.Join(dir, "report.pdf")
		runChromium(t, bin, "--no-pdf-header-footer", "--print-to-pdf="+pdf, "file://"+page)
		data, err := os.ReadFile(pdf)
		require.NoError(t, err)
		assert.True(t, bytes.HasPrefix(data, []byte("%PDF")))
		pages := bytes.Count(data, []byte("/Type /Page\n")) + bytes.Count(data, []byte("/Type /Page>>")) + bytes.Count(data, []byte("/Type/Page"))
		t.Logf("PDF: %d bytes, about %d pages", len(data), pages)
		assert.Greater(t, len(data), 20000)
	})
}
