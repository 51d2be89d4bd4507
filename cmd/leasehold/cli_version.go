package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// versionCmd is the version command (and --version): one line, "leasehold
// <version> (<go version>)".
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: leasehold version")
		fmt.Fprintln(w, "       leasehold --version")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Prints the leasehold module version this binary was built from, and the Go")
		fmt.Fprintln(w, "version that built it. A 'go install github.com/leasehold/leasehold/cmd/leasehold@v1.2.3'")
		fmt.Fprintln(w, "build reports v1.2.3; a build from a checkout reports what the go command")
		fmt.Fprintln(w, "stamped (a pseudo-version from the VCS, or (devel)).")
	}
	pos, code, ok := parseArgs(fs, "version", args, stdout, stderr)
	if !ok {
		return code
	}
	if err := noArgs(pos); err != nil {
		return exitCode(stderr, "version", err)
	}
	v, goVersion := buildVersion(debug.ReadBuildInfo())
	fmt.Fprintf(stdout, "leasehold %s (%s)\n", v, goVersion)
	return 0
}

// buildVersion reads the main module's version and the Go version from
// build info; "(devel)" when the binary carries none, as a test binary or a
// build without module information.
func buildVersion(bi *debug.BuildInfo, ok bool) (version, goVersion string) {
	version, goVersion = "(devel)", "unknown go version"
	if !ok || bi == nil {
		return version, goVersion
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	return version, goVersion
}
