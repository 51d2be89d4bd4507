package sqlserver

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/leasehold/leasehold/claims"
)

// SQL Server error numbers the adapter branches on.
const (
	errDeadlockVictim = 1205 // chosen as deadlock victim; the batch was rolled back
	errLockTimeout    = 1222 // lock request time out period exceeded
	errDupKeyIndex    = 2601 // duplicate key row in a unique index (filtered indexes too)
	errDupKeyUnique   = 2627 // violation of a PRIMARY KEY or UNIQUE constraint
)

// errorNumbers returns the SQL Server error numbers in err's chain: the
// mssql.Error found by errors.As (a ServerError unwraps to one) and every
// error the server sent with it (All). Number alone is only the last one.
func errorNumbers(err error) []int32 {
	var me mssql.Error
	if !errors.As(err, &me) {
		return nil
	}
	nums := []int32{me.Number}
	for _, e := range me.All {
		nums = append(nums, e.Number)
	}
	return nums
}

func hasNumber(err error, nums ...int32) bool {
	for _, n := range errorNumbers(err) {
		if slices.Contains(nums, n) {
			return true
		}
	}
	return false
}

// isDuplicate reports a unique-key violation. The batches turn a lost insert
// race into an empty result where they can, but a duplicate may still
// surface as error 2601 (unique index) or 2627 (constraint); it means the
// same thing: another writer got there first.
func isDuplicate(err error) bool { return hasNumber(err, errDupKeyIndex, errDupKeyUnique) }

// retryInCall reports the errors query, queryRow and exec send again
// themselves: a deadlock victim's or a lock timeout's batch was rolled back
// whole (every batch is one atomic decision and XACT_ABORT is ON), and the
// next attempt re-evaluates it on the current rows.
func retryInCall(err error) bool { return hasNumber(err, errDeadlockVictim, errLockTimeout) }

// retryable reports the errors after which the batch certainly did not take
// effect, so the caller may send it again:
//   - the in-call retryable ones (deadlock victim, lock timeout: the batch
//     was rolled back whole);
//   - a connection that go-mssqldb found bad before the batch was sent (it
//     wraps those in mssql.RetryableError, which is driver.ErrBadConn;
//     database/sql has already retried them on other connections), and a
//     SessionInitSQL that failed on checkout (driver.ErrBadConn too);
//   - any error opening a connection on a pool made by Open (connectError):
//     database/sql sends a batch only on a connection that opened, so a
//     refused or timed-out dial, a DNS failure, a TLS or login failure
//     (during a server restart: 18456, 4060), or a connection reset during
//     the prelogin all mean nothing of the batch reached the server;
//   - on any pool, the connect errors go-mssqldb returns in forms that
//     cannot come from a batch in flight: a *net.OpError whose Op is
//     "dial" (go-mssqldb wraps it in "unable to open tcp connection with
//     host ..." with %w), a *net.DNSError (returned unwrapped when the
//     host name does not resolve; only dialing resolves names), and a
//     failed TLS handshake, which go-mssqldb reports only as the text
//     "TLS Handshake failed: ..." (%v, so no type survives; a handshake
//     happens only while connecting).
//
// Not retryable: a context cancellation, or a connection lost after the
// batch was sent (a *net.OpError "read" or "write", io.EOF: it may have
// committed), a fatal mssql.ServerError, and every other server error.
func retryable(err error) bool {
	if retryInCall(err) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	var (
		ce  connectError
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.As(err, &ce), errors.As(err, &dns):
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true
	}
	// The text only when no server error is in the chain: a server message
	// may quote anything.
	var me mssql.Error
	return !errors.As(err, &me) && strings.Contains(err.Error(), tlsHandshakeFailed)
}

// tlsHandshakeFailed starts go-mssqldb's error for a failed TLS handshake
// while connecting (tds.go, connect and getTLSConn).
const tlsHandshakeFailed = "TLS Handshake failed: "

// connectError is an error opening a connection, marked by Open's
// connector: nothing was sent on that connection yet.
type connectError struct{ err error }

func (e connectError) Error() string { return "connect: " + e.err.Error() }
func (e connectError) Unwrap() error { return e.err }

// dbError names the failed statement and marks the errors after which it
// certainly did not take effect as claims.ErrRetryable.
func dbError(name string, err error) error {
	if retryable(err) {
		return fmt.Errorf("sqlserver: %s: %w: %w", name, claims.ErrRetryable, err)
	}
	return fmt.Errorf("sqlserver: %s: %w", name, err)
}
