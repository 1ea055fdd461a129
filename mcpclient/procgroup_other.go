//go:build !unix

package mcpclient

import "os/exec"

// ownProcessGroup does nothing here: the child alone is stopped.
func ownProcessGroup(cmd *exec.Cmd) (killAll func()) { return func() {} }
