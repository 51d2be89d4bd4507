//go:build tools

// Package tools pins the command-line tools leasehold's Makefile runs, so
// the library's own go.mod stays free of them.
package tools

import (
	_ "github.com/pressly/goose/v3/cmd/goose"
	_ "github.com/sqlc-dev/sqlc/cmd/sqlc"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
