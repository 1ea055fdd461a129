package main

import (
	"context"

	"github.com/spf13/cobra"
)

// forward sends the command to a running daemon that holds the database and
// prints its output; done reports whether the daemon ran it.
func (a *app) forward(cmd *cobra.Command) (done bool, err error) {
	_ = cmd
	return false, nil
}

// daemonHoldsDB reports whether a daemon answering at http.listen holds the
// database this command would open.
func (a *app) daemonHoldsDB(ctx context.Context) bool {
	_ = ctx
	return false
}
