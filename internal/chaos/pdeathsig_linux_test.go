package chaos_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the worker if the test process dies
// without cleaning up (a panic, a -timeout); stdin closing covers the rest.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
