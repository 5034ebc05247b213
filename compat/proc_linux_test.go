package compat

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the server in its own process group and has the kernel
// kill it if the test binary dies first.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
