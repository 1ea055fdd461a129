package report

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// Formats are the report formats, in the order they are written.
var Formats = []string{"markdown", "json", "html"}

// ParseFormats reads a comma-separated (or listed) set of formats; empty
// means all of them. The result follows the order of Formats.
func ParseFormats(items ...string) ([]string, error) {
	want := map[string]bool{}
	for _, item := range items {
		for _, f := range strings.Split(item, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			if f == "" {
				continue
			}
			if f == "md" {
				f = "markdown"
			}
			ok := false
			for _, known := range Formats {
				ok = ok || f == known
			}
			if !ok {
				return nil, fmt.Errorf("unknown format %q: allowed formats are %s", f, strings.Join(Formats, ", "))
			}
			want[f] = true
		}
	}
	var out []string
	for _, f := range Formats {
		if want[f] || len(want) == 0 {
			out = append(out, f)
		}
	}
	return out, nil
}

// File names inside a report folder.
const (
	JSONFile     = "report.json"
	MarkdownFile = "report.md"
	HTMLFile     = "report.html"
	ChartsDir    = "charts"
	PRDir        = "pr"
)

// stampLayout names a report folder after the end of its window (UTC).
const stampLayout = "2006-01-02T150405Z"

var stampRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{6}Z$`)

// Stamp is the folder name of a report whose window ends at t.
func Stamp(t time.Time) string { return t.UTC().Format(stampLayout) }

// ServerDir is the folder holding a server's reports under outDir: one path
// element named after the server (see serverFolder), so that no server name,
// even one stored before decoding refused such names, leads out of outDir.
func ServerDir(outDir, server string) string { return filepath.Join(outDir, serverFolder(server)) }

// serverFolder is the folder name of a server's reports: the name
// percent-encoded as a URL path segment (so /, \, control characters, % and
// spaces are encoded, and distinct names give distinct folders), with a
// leading dot encoded too (%2E), so that it is never ".", ".." or hidden.
// An empty name gives "%".
func serverFolder(server string) string { return recommend.PathSegment(server) }

// WriteFolder writes the report into dir: report.json always (the next
// report compares with it), report.md with its charts under charts/ and
// report.html as asked by formats, and the PR folder under pr/. The folder
// appears complete or not at all: it is written beside dir and renamed.
// It returns the files written, relative to dir.
func WriteFolder(dir string, r *Report, formats []string) ([]string, error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("report: create %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("report: write into %s: %w", parent, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	rr := *r
	if err := writePR(filepath.Join(tmp, PRDir), &rr); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, data []byte) error {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("report: write %s: %w", name, err)
		}
		files = append(files, name)
		return nil
	}
	var chartList []Chart
	for _, f := range formats {
		if f == "markdown" || f == "html" {
			if chartList, err = Charts(&rr); err != nil {
				return nil, err
			}
			break
		}
	}
	for _, f := range formats {
		switch f {
		case "markdown":
			for _, c := range chartList {
				if err := write(filepath.Join(ChartsDir, c.File), append(c.SVG, '\n')); err != nil {
					return nil, err
				}
			}
			if err := write(MarkdownFile, []byte(Markdown(&rr, chartList))); err != nil {
				return nil, err
			}
		case "html":
			if err := write(HTMLFile, []byte(HTML(&rr, chartList))); err != nil {
				return nil, err
			}
		}
	}
	js, err := JSON(&rr)
	if err != nil {
		return nil, err
	}
	if err := write(JSONFile, js); err != nil {
		return nil, err
	}
	if rr.rec != nil || rr.set != nil {
		files = append(files, PRDir+"/")
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("report: replace %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	done = true
	r.Recommendation = rr.Recommendation
	sort.Strings(files)
	return files, nil
}

// writePR writes the PR folder of the report's recommendation into dir, as
// `mcptrail recommend --out` does (one folder per grant for a server whose
// calls carry grants), and records where in r.Recommendation (a copy of its
// grants, so that the caller's report changes only when the folder is done).
func writePR(dir string, r *Report) error {
	var err error
	switch {
	case r.set != nil:
		err = recommend.WriteSetFolder(dir, r.set)
		r.Recommendation.Grants = append([]GrantRecommendation(nil), r.Recommendation.Grants...)
		for i := range r.Recommendation.Grants {
			g := &r.Recommendation.Grants[i]
			g.PRFolder = PRDir + "/" + recommend.PathSegment(g.Grant)
		}
	case r.rec != nil:
		err = recommend.WriteFolder(dir, r.rec)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("report: PR folder: %w", err)
	}
	r.Recommendation.PRFolder = PRDir
	return nil
}

// reportFolders lists the report folders under serverDir, oldest first.
func reportFolders(serverDir string) ([]string, error) {
	entries, err := os.ReadDir(serverDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && stampRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Previous reads the newest report under serverDir whose folder is older
// than stamp; nil when there is none. Unreadable reports are skipped.
func Previous(serverDir, stamp string) (*Report, string, error) {
	folders, err := reportFolders(serverDir)
	if err != nil {
		return nil, "", fmt.Errorf("report: previous reports in %s: %w", serverDir, err)
	}
	for i := len(folders) - 1; i >= 0; i-- {
		if folders[i] >= stamp {
			continue
		}
		data, err := os.ReadFile(filepath.Join(serverDir, folders[i], JSONFile))
		if err != nil {
			continue
		}
		r, err := ParseJSON(data)
		if err != nil {
			continue
		}
		return r, folders[i], nil
	}
	return nil, "", nil
}

// Prune removes the oldest report folders under serverDir so that keep
// remain (keep <= 0 keeps all); it returns the folders removed. Only
// folders named like reports are touched.
func Prune(serverDir string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	folders, err := reportFolders(serverDir)
	if err != nil {
		return nil, fmt.Errorf("report: prune %s: %w", serverDir, err)
	}
	var removed []string
	for len(folders) > keep {
		if err := os.RemoveAll(filepath.Join(serverDir, folders[0])); err != nil {
			return removed, fmt.Errorf("report: prune %s: %w", serverDir, err)
		}
		removed = append(removed, folders[0])
		folders = folders[1:]
	}
	return removed, nil
}

// RunOptions are one report run for one server into an output folder.
type RunOptions struct {
	Options
	OutDir  string
	Formats []string
	Keep    int
}

// Result is what a run wrote.
type Result struct {
	Report *Report
	Dir    string   // the report's folder
	Files  []string // relative to Dir
	Pruned []string // older folders removed
}

// runMu serialises writing runs in this process, so that a scheduled run
// and one asked for through the daemon's API never interleave in a folder.
var runMu sync.Mutex

// Run builds one server's report and writes it to
// OutDir/<server>/<window end>/, comparing with the newest report already
// there, then prunes the server's folder to Keep reports.
func Run(ctx context.Context, store *analytics.Store, o RunOptions) (*Result, error) {
	runMu.Lock()
	defer runMu.Unlock()
	if o.OutDir == "" {
		return nil, errors.New("report: no output folder")
	}
	now := o.Now.UTC()
	if now.IsZero() {
		now = time.Now().UTC()
		o.Now = now
	}
	sdir := ServerDir(o.OutDir, o.Server)
	stamp := Stamp(now)
	prev, prevFolder, err := Previous(sdir, stamp)
	if err != nil {
		return nil, err
	}
	o.Previous, o.PreviousFolder = prev, prevFolder
	r, err := Build(ctx, store, o.Options)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(sdir, stamp)
	files, err := WriteFolder(dir, r, o.Formats)
	if err != nil {
		return nil, err
	}
	res := &Result{Report: r, Dir: dir, Files: files}
	if res.Pruned, err = Prune(sdir, o.Keep); err != nil {
		return res, err
	}
	return res, nil
}
