package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/otlpreceiver"
	"github.com/mcptrail/mcptrail/report"
)

// dispatch runs a request in the daemon that answers at http.listen and
// holds this database, printing its answer (byte-identical to running here),
// and otherwise opens the file and runs it here. Inside the daemon it runs
// on the daemon's store. Only typed requests cross: input files travel as
// content and output folders come back as files written here.
func (a *app) dispatch(ctx context.Context, req api.Request, readOnly bool, run func(context.Context, *analytics.Store) error) error {
	if a.store != nil {
		return run(ctx, a.store)
	}
	if a.shardsURL != "" {
		return a.dispatchShards(ctx, req)
	}
	common := req.CommonFields()
	common.Database = a.dbPath()
	if a.nowFixed {
		now := a.now
		common.Now = &now
	}
	client, err := a.apiClient()
	if err != nil {
		return err
	}
	sink := api.Sink{Stdout: a.stdout, Stderr: a.stderr, File: a.outWriter(req)}
	code, reached, _, err := client.Do(ctx, req, sink)
	if err != nil && !errors.Is(err, api.ErrNoToken) && !errors.Is(err, api.ErrNotProven) {
		return fmt.Errorf("mcptrail serve at %s (http.listen): %w", a.cfg.HTTP.Listen, err)
	}
	if reached && err == nil {
		a.forwardedCode = &code
		return nil
	}
	// No daemon, or one this CLI cannot use (it has no token for it, or
	// the answer proved none): that daemon may hold another database (a
	// project of its own), so the file is opened here; only when the file
	// is held does the daemon's trouble matter, and it is named.
	unusable := err
	store, closeStore, err := a.openStore(ctx, readOnly)
	if err != nil {
		if unusable != nil && errors.Is(err, analytics.ErrLocked) {
			return fmt.Errorf("mcptrail serve at %s (http.listen): %w", a.cfg.HTTP.Listen, unusable)
		}
		return err
	}
	if errors.Is(unusable, api.ErrNotProven) {
		a.log.Warn("ran on the database file: the process answering at http.listen could not be used", "http.listen", a.cfg.HTTP.Listen, "err", unusable)
	}
	defer closeStore()
	return run(ctx, store)
}

// apiClient is the client of the daemon at http.listen, with the token from
// http.token or http.token_file.
func (a *app) apiClient() (*api.Client, error) {
	c := &api.Client{Listen: a.cfg.HTTP.Listen, Token: a.cfg.HTTP.Token, TokenFile: a.tokenFile(), CertFile: a.cfg.HTTP.TLSCert}
	if c.Token == "" {
		// Unreadable or missing: a daemon that answers is then refused with
		// a message naming the file.
		c.Token, _ = api.ReadToken(c.TokenFile)
	}
	return c, nil
}

// tokenFile is http.token_file, by default beside the database.
func (a *app) tokenFile() string {
	if a.cfg.HTTP.TokenFile != "" {
		return a.cfg.HTTP.TokenFile
	}
	return api.DefaultTokenFile(a.dbPath())
}

func (a *app) otlpTokenFile() string {
	if a.cfg.OTLP.TokenFile != "" {
		return a.cfg.OTLP.TokenFile
	}
	return otlpreceiver.DefaultTokenFile(a.dbPath())
}

// outWriter writes the files of an output folder the daemon sends back, for
// the requests that have one. A report folder is replaced whole, as the
// report command does on the file. Like every file written while a database
// is open, they are private to their owner: they tell who did what.
func (a *app) outWriter(req api.Request) func(api.File) error {
	var out string
	var replace bool
	switch r := req.(type) {
	case *api.RecommendRequest:
		out = r.Out
	case *api.ReportRequest:
		out, replace = r.Out, true
	}
	if out == "" {
		return nil
	}
	cleared := map[string]bool{}
	return func(f api.File) error {
		// A clean local name only: "a/../b/c" is local, but its first two
		// parts name the folder a report replaces, which would be --out.
		if !filepath.IsLocal(f.Name) || path.Clean(f.Name) != f.Name {
			return fmt.Errorf("the daemon sent a file outside the output folder: %q", f.Name)
		}
		rel := filepath.FromSlash(f.Name)
		if parts := strings.SplitN(f.Name, "/", 3); replace && len(parts) == 3 {
			folder := filepath.Join(out, parts[0], parts[1])
			if !cleared[folder] {
				if err := os.RemoveAll(folder); err != nil {
					return fmt.Errorf("replace %s: %w", folder, err)
				}
				cleared[folder] = true
			}
		}
		p := filepath.Join(out, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		tmp := p + ".partial"
		if err := os.WriteFile(tmp, f.Content, 0o600); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		return os.Rename(tmp, p)
	}
}

// outPath is where a command writes its output folder: the folder the
// daemon made for the request, or the user's --out on the file.
func (a *app) outPath(out string) string {
	if a.outDir != "" {
		return a.outDir
	}
	return out
}

// outLabel names a path inside outPath as the user knows it.
func (a *app) outLabel(out, p string) string {
	if a.outDir == "" {
		return p
	}
	rel, err := filepath.Rel(a.outDir, p)
	if err != nil {
		return p
	}
	return filepath.Join(out, rel)
}

// readInput reads a file named on the command line, for a request.
func readInput(what, path string) (*api.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return &api.File{Name: path, Content: data}, nil
}

// previousReports are the report.json files of the newest report of each
// server folder under out that is older than the window's end (the one
// report.Previous finds): what a new report is compared with.
func previousReports(out string, now time.Time) ([]api.File, error) {
	servers, err := os.ReadDir(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--out %s: %w", out, err)
	}
	var files []api.File
	for _, s := range servers {
		if !s.IsDir() {
			continue
		}
		prev, folder, err := report.Previous(filepath.Join(out, s.Name()), report.Stamp(now))
		if err != nil || prev == nil {
			continue
		}
		rel := filepath.Join(s.Name(), folder, report.JSONFile)
		data, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			continue
		}
		files = append(files, api.File{Name: filepath.ToSlash(rel), Content: data})
	}
	return files, nil
}

// settings are this CLI's recommend.* settings, sent along so that the
// daemon answers as the file would.
func (a *app) settings() (*api.Settings, error) {
	r, g := a.cfg.Recommend, a.cfg.Regression
	s := &api.Settings{
		Window: api.Duration(r.Window), MinDays: r.MinDays, MinSessions: r.MinSessions, Headroom: r.Headroom,
		MinLimit: r.MinLimit, RareMaxCalls: r.RareMaxCalls, RareMaxDays: r.RareMaxDays, RareMaxShare: r.RareMaxSessionShare, PollMinCalls: r.PollMinCalls,
		PollMaxInterval: api.Duration(r.PollMaxInterval), PollMaxCV: r.PollMaxCV, RunawayFactor: r.RunawayFactor,
		Grace:           api.Duration(r.Grace),
		RegressionWatch: api.Duration(g.Watch), RegressionBaseline: api.Duration(g.Baseline),
		RegressionMinRefused: g.MinRefused, RegressionMinShare: g.MinShare,
	}
	if r.Overrides != "" && a.store == nil {
		f, err := readInput("recommend.overrides", r.Overrides)
		if err != nil {
			return nil, err
		}
		s.Overrides = f
	}
	return s, nil
}

// applySettings takes a request's settings into the configuration.
func (a *app) applySettings(s *api.Settings) {
	if s == nil {
		return
	}
	r := &a.cfg.Recommend
	r.Window, r.MinDays, r.MinSessions, r.Headroom = time.Duration(s.Window), s.MinDays, s.MinSessions, s.Headroom
	r.MinLimit, r.RareMaxCalls, r.RareMaxDays, r.PollMinCalls = s.MinLimit, s.RareMaxCalls, s.RareMaxDays, s.PollMinCalls
	r.RareMaxSessionShare = s.RareMaxShare
	r.PollMaxInterval, r.PollMaxCV, r.RunawayFactor, r.Grace = time.Duration(s.PollMaxInterval), s.PollMaxCV, s.RunawayFactor, time.Duration(s.Grace)
	g := &a.cfg.Regression
	g.Watch, g.Baseline, g.MinRefused, g.MinShare = time.Duration(s.RegressionWatch), time.Duration(s.RegressionBaseline),
		s.RegressionMinRefused, s.RegressionMinShare
	a.overridesDoc = s.Overrides
	if s.Overrides == nil {
		r.Overrides = ""
	}
}

// parseSince reads a --since value; empty gives def.
func parseSince(since string, def time.Duration, example string) (time.Duration, error) {
	if since == "" {
		return def, nil
	}
	d, err := duration.Parse(since)
	if err != nil || d <= 0 {
		return 0, usageErrorf("--since %q: want a positive duration such as %s", since, example)
	}
	return d, nil
}

// lockedHint says who holds the database file another process locked,
// as far as the daemon at http.listen tells: a command that reached here
// runs on the file alone (it has no endpoint, or no daemon answered).
func (a *app) lockedHint(ctx context.Context) string {
	st, answered := a.daemonStatus(ctx)
	switch {
	case answered && st.Database == a.dbPath():
		return fmt.Sprintf("mcptrail serve at %s (http.listen) holds it, and this command runs on the file alone: stop serve first", a.cfg.HTTP.Listen)
	case answered:
		return fmt.Sprintf("another process (an ingest?) holds it; the daemon at %s (http.listen) holds %s", a.cfg.HTTP.Listen, st.Database)
	}
	return fmt.Sprintf("is `mcptrail serve` (or an ingest) running on it? No daemon answered at %s (http.listen)", a.cfg.HTTP.Listen)
}

// daemonHoldsDB reports whether a daemon answering at http.listen holds the
// database this command would open.
func (a *app) daemonHoldsDB(ctx context.Context) bool {
	st, answered := a.daemonStatus(ctx)
	return answered && st.Database == a.dbPath()
}

// daemonStatus is the status of the daemon at http.listen; answered is
// false when none answered with one.
func (a *app) daemonStatus(ctx context.Context) (st api.Status, answered bool) {
	c, err := a.apiClient()
	if err != nil {
		return st, false
	}
	st, reached, err := c.Status(ctx)
	return st, err == nil && reached
}
