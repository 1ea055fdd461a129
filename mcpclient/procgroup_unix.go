//go:build unix

package mcpclient

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own, killed whole
// when cmd's context ends, and returns a function that kills what is left
// of it: a server started through a wrapper (npx, sh -c) runs as a
// grandchild, which killing the child alone would leave running.
func ownProcessGroup(cmd *exec.Cmd) (killAll func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	kill := func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Cancel = kill
	return func() {
		if cmd.Process != nil {
			_ = kill()
		}
	}
}
