package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/membership"
)

func TestCLIKeys(t *testing.T) {
	pool := pgtest.Schema(t)
	store, url := postgres.New(pool), schemaURL(pool.Config().ConnConfig.RuntimeParams["search_path"])
	ctx := context.Background()

	code, out, errOut := runCLI(t, keysCmd, "show", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "dedupe key version 2 (RFC 8785)\n", out, "a new database")

	// A database that held work before schema 14, and a live node that
	// computes version 1 only.
	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-old", Stack: "blue", Mode: "full"}))
	pgtest.Exec(t, pool, `UPDATE leasehold_key_version SET version = 1`)
	code, out, errOut = runCLI(t, keysCmd, "show", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "dedupe key version 1 (numbers as written)\n", out)

	code, out, errOut = runCLI(t, keysCmd, "switch", "-url", url)
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "refused: 1 live node(s) compute only version 1")
	require.Regexp(t, `(?m)^node-old\s+blue\s+-\s+1\s+\S+ ago$`, errOut)

	require.NoError(t, store.RegisterNode(ctx, membership.Member{ID: "node-old", Stack: "blue", Mode: "full", KeyVersion: 2}))
	code, out, errOut = runCLI(t, keysCmd, "switch", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "dedupe key version 2 (RFC 8785)\n", out)
	code, out, errOut = runCLI(t, keysCmd, "show", "-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^dedupe key version 2 \(RFC 8785\), since \S+Z\n$`, out)

	code, _, errOut = runCLI(t, keysCmd, "switch", "-url", url, "-lock-wait", "0s")
	require.Equal(t, 2, code, errOut)
	code, _, errOut = runCLI(t, keysCmd, "flip", "-url", url)
	require.Equal(t, 2, code, errOut)
}
