package sqlserver

// The SQL Server migration lock's Go side, against the fake driver of
// unit_test.go: no SQL Server runs here (see migrate_static_test.go for the
// T-SQL, and MSSQL_URL for a real server).

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockerOnFake is a migrationLocker whose batches are their statement names,
// as the fake expects, and a connection of the fake's pool.
func lockerOnFake(t *testing.T, answer func(name string, params map[string]any) fakeResult) (*fake, *migrationLocker) {
	f := newFake(t)
	f.answer = answer
	return f, &migrationLocker{acquire: acquireMigrationLock, release: releaseMigrationLock, wait: 5 * time.Second, timeout: time.Minute}
}

func result(r int64) fakeResult {
	return fakeResult{cols: []string{"result"}, rows: [][]driver.Value{{r}}}
}

func TestUnitMigrationLock(t *testing.T) {
	t.Run("retries a wait that timed out or lost a deadlock, until granted", func(t *testing.T) {
		answers := []int64{applockTimedOut, applockDeadlock, applockGrantedWaited}
		f, l := lockerOnFake(t, func(name string, _ map[string]any) fakeResult {
			require.Equal(t, acquireMigrationLock, name)
			r := answers[0]
			answers = answers[1:]
			return result(r)
		})
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, l.SessionLock(t.Context(), conn))
		require.Equal(t, 3, f.calls(acquireMigrationLock))
		require.Equal(t, map[string]any{"wait_ms": int64(5000)}, f.params[acquireMigrationLock])
	})
	t.Run("gives up after its timeout", func(t *testing.T) {
		f, l := lockerOnFake(t, func(string, map[string]any) fakeResult { return result(applockTimedOut) })
		l.timeout = 0
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		require.ErrorContains(t, l.SessionLock(t.Context(), conn), "another session has held it")
		require.Equal(t, 1, f.calls(acquireMigrationLock))
	})
	t.Run("gives up when its context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		f, l := lockerOnFake(t, func(string, map[string]any) fakeResult { cancel(); return result(applockTimedOut) })
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		require.ErrorIs(t, l.SessionLock(ctx, conn), context.Canceled)
	})
	t.Run("a call error is not retried", func(t *testing.T) {
		f, l := lockerOnFake(t, func(string, map[string]any) fakeResult { return result(-999) })
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		require.ErrorContains(t, l.SessionLock(t.Context(), conn), "sp_getapplock returned -999")
		require.Equal(t, 1, f.calls(acquireMigrationLock))
	})
	t.Run("releases, and keeps the connection", func(t *testing.T) {
		f, l := lockerOnFake(t, func(string, map[string]any) fakeResult { return result(0) })
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		require.NoError(t, l.SessionUnlock(t.Context(), conn))
		require.NoError(t, conn.Close())
		require.Equal(t, 1, f.store.db.Stats().Idle)
	})
	t.Run("a failed release discards the connection, ending its session and its locks", func(t *testing.T) {
		f, l := lockerOnFake(t, func(string, map[string]any) fakeResult {
			return fakeResult{err: errors.New("mssql: Cannot release the application lock")}
		})
		conn, err := f.store.db.Conn(t.Context())
		require.NoError(t, err)
		require.ErrorContains(t, l.SessionUnlock(t.Context(), conn), "the connection was closed")
		_ = conn.Close()
		require.Zero(t, f.store.db.Stats().OpenConnections)
	})
}

// NewMigrator loads migrate.sql and builds a Provider that holds the lock.
func TestUnitNewMigrator(t *testing.T) {
	qs, err := migrateStatements()
	require.NoError(t, err)
	require.Contains(t, qs, acquireMigrationLock)
	require.Contains(t, qs, releaseMigrationLock)
	f := newFake(t)
	_, err = NewMigrator(f.store.db)
	require.NoError(t, err)
}
