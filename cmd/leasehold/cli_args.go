package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// parseArgs parses the flags of command cmd ("episodes") in args, where
// flags may come before, between and after the positional arguments, and
// returns the positional ones. When ok is false the command ends with code:
// 0 after -h (the command's usage on stdout), 2 after a bad flag (one line
// on stderr, "leasehold <cmd>: ..."). fs.Usage must write to fs.Output().
func parseArgs(fs *flag.FlagSet, cmd string, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	usage := fs.Usage
	// The flag package prints its own error and the usage on a bad flag;
	// the error is reported here instead, as one line like every usage error.
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(stderr) }()
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			fs.SetOutput(stdout)
			usage()
			return nil, 0, false
		case err != nil:
			return nil, exitCode(stderr, cmd, usageError{err.Error()}), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" { // everything after -- is positional
			return append(pos, rest...), 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// subcommand splits the positional arguments of cmd into its subcommand,
// one of subs, and the rest. None given prints a line and the usage on
// stderr; an unknown one is a usage error. When ok is false the command
// ends with code 2.
func subcommand(fs *flag.FlagSet, cmd string, pos []string, stderr io.Writer, subs ...string) (sub string, rest []string, code int, ok bool) {
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "leasehold %s: missing subcommand: want %s\n\n", cmd, oneOf(subs))
		fs.SetOutput(stderr)
		fs.Usage()
		return "", nil, 2, false
	}
	if !slices.Contains(subs, pos[0]) {
		return "", nil, exitCode(stderr, cmd, usagef("unknown subcommand %q: want %s", pos[0], oneOf(subs))), false
	}
	return pos[0], pos[1:], 0, true
}

// oneOf lists choices as "a", "a or b", "a, b or c".
func oneOf(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// noArgs is a usage error when a command that takes no more positional
// arguments got some.
func noArgs(rest []string) error {
	if len(rest) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(rest, " "))
	}
	return nil
}

// flagsFor is a usage error when a flag given on the command line is not
// one of those the subcommand sub takes (-url is taken by all).
func flagsFor(fs *flag.FlagSet, sub string, allowed ...string) error {
	var wrong []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "url" && !slices.Contains(allowed, f.Name) {
			wrong = append(wrong, "-"+f.Name)
		}
	})
	switch len(wrong) {
	case 0:
		return nil
	case 1:
		return usagef("%s does not apply to %s", wrong[0], sub)
	default:
		return usagef("%s do not apply to %s", strings.Join(wrong, ", "), sub)
	}
}
