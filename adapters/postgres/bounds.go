package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/db"
)

// batcher is what pipeline needs of the Store's connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all send batches.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lockBound is the bound_ms a takeover statement (AcquireClaim,
// ClaimForRecovery, RequeueOrphan, ClaimAvailable) sets as its
// own lock_timeout, LOCAL, before it reaches a row: claims.TxBound of the
// context, so the takeover waits at most that long behind a frozen holder
// and costs no second statement. Inside a caller's transaction it is 0 and
// the statement leaves the caller's settings alone: a LOCAL setting there
// would outlive the statement.
func (s *Store) lockBound(ctx context.Context) int64 {
	if _, inTx := s.conn.(pgx.Tx); inTx {
		return 0
	}
	return claims.TxBoundFrom(ctx).Milliseconds()
}

// pipeline returns the connection on which the Exec calls that come first
// are queued and sent, in one batch, with the Query or QueryRow that
// follows: one round trip, which Postgres runs as one implicit transaction
// (RequeueOrphan: RequeueOrphanLock and RequeueOrphan). Inside a caller's
// transaction, or on a connection that cannot send batches, each runs at
// once.
func (s *Store) pipeline() db.DBTX {
	if _, inTx := s.conn.(pgx.Tx); inTx {
		return s.conn
	}
	b, ok := s.conn.(batcher)
	if !ok {
		return s.conn
	}
	return &pipelined{conn: s.conn, b: b}
}

// boundTransaction makes tx's first statement BoundTransaction, so that the
// server ends the transaction if its holder freezes inside it.
func (s *Store) boundTransaction(ctx context.Context, tx pgx.Tx) error {
	if err := s.q.BoundTransaction(ctx, tx, claims.TxBoundFrom(ctx).Milliseconds()); err != nil {
		return dbError("BoundTransaction", err)
	}
	return nil
}

// pipelined queues Exec calls and sends them, in order, in one batch with
// the Query or QueryRow that follows. It serves one generated method call.
type pipelined struct {
	conn  db.DBTX
	b     batcher
	queue pgx.Batch
	sent  bool
}

func (p *pipelined) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.queue.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (p *pipelined) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p *pipelined) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// send sends the queued statements and sql in one batch and reads the
// queued ones' results, leaving sql's to the caller.
func (p *pipelined) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if p.sent {
		return nil, errors.New("postgres: internal error: a pipelined takeover serves one statement")
	}
	p.sent = true
	prefix := p.queue.Len()
	p.queue.Queue(sql, args...)
	br := p.b.SendBatch(ctx, &p.queue)
	for range prefix {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

// batchRows closes the batch once its rows are closed.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow closes the batch once its row is read.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
