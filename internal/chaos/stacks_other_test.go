//go:build !unix

package chaos_test

const envStacks = "LEASEHOLD_CHAOS_STACKS"

func dumpStacksOnSignal(string, string) {}

func (c *cluster) stacks() string { return "(goroutine dumps need SIGUSR1: unix only)" }
