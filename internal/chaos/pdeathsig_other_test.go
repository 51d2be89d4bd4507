//go:build unix && !linux

package chaos_test

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; a worker elsewhere
// exits when its stdin closes, which the test's death also causes.
func dieWithParent(*exec.Cmd) {}
