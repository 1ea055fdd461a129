package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/server"
)

// forward sends the command to a daemon that answers at http.listen and holds
// this database, and prints its output: byte-identical to running it here.
// done reports whether the daemon ran it; otherwise the caller opens the file.
func (a *app) forward(cmd *cobra.Command) (done bool, err error) {
	if a.store != nil {
		return false, nil // already inside the daemon
	}
	code, reached, err := server.Forward(cmd.Context(), a.cfg.HTTP.Listen, a.cfg.HTTP.Token, a.forwardArgs(), a.stdout, a.stderr)
	if err != nil {
		return true, fmt.Errorf("mcptrail serve at %s (http.listen): %w", a.cfg.HTTP.Listen, err)
	}
	if !reached || code == exitNotMine {
		return false, nil
	}
	a.forwardedCode = &code
	return true, nil
}

// storeOrForward runs the command in the daemon when one answers at
// http.listen for this database (store is then nil: the command is done),
// and otherwise opens the file. A nil store with a nil error means
// forwarded.
func (a *app) storeOrForward(cmd *cobra.Command, readOnly bool) (store *analytics.Store, closeStore func(), err error) {
	if done, err := a.forward(cmd); done || err != nil {
		return nil, nil, err
	}
	return a.openStore(cmd.Context(), readOnly)
}

// forwardArgs is the command line as the daemon must see it: file paths made
// absolute (the daemon has its own working directory), the database and the
// reference time stated explicitly.
func (a *app) forwardArgs() []string {
	pathFlags := map[string]bool{"--policy": true, "--catalog": true, "--out": true, "--config": true}
	var out []string
	for i := 0; i < len(a.args); i++ {
		arg := a.args[i]
		switch {
		case arg == "--db" || arg == "--now":
			i++ // restated below
			continue
		case strings.HasPrefix(arg, "--db=") || strings.HasPrefix(arg, "--now="):
			continue
		case pathFlags[arg] && i+1 < len(a.args):
			out = append(out, arg, absPath(a.args[i+1]))
			i++
			continue
		}
		if k, v, ok := strings.Cut(arg, "="); ok && pathFlags[k] {
			out = append(out, k+"="+absPath(v))
			continue
		}
		if !strings.HasPrefix(arg, "-") {
			if _, err := os.Stat(arg); err == nil {
				arg = absPath(arg)
			}
		}
		out = append(out, arg)
	}
	out = append(out, "--db", a.dbPath())
	if a.nowIsFixed() {
		out = append(out, "--now", a.now.Format(time.RFC3339Nano))
	}
	return out
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// daemonHoldsDB reports whether a daemon answering at http.listen holds the
// database this command would open.
func (a *app) daemonHoldsDB(ctx context.Context) bool {
	code, reached, err := server.Forward(ctx, a.cfg.HTTP.Listen, a.cfg.HTTP.Token,
		[]string{"--db", a.dbPath(), "queries", "--format", "csv"}, io.Discard, io.Discard)
	return err == nil && reached && code != exitNotMine
}
