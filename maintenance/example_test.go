package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/adapters/postgres"
	"github.com/leasehold/leasehold/maintenance"
	"github.com/leasehold/leasehold/telemetry"
)

// Every node runs a Runner over its adapter; the database's maintenance
// lock lets one run work at a time, and the others skip.
func ExampleNewRunner() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return
	}
	defer pool.Close()
	logger := slog.Default()
	r, err := maintenance.NewRunner(postgres.New(pool), maintenance.Config{
		Retention: 3 * 24 * time.Hour, // dedupe keys are freed after 3 days
		Lease:     2 * time.Minute,    // the nodes' work-claim lease
	}, logger, telemetry.NewSlog(logger))
	if err != nil {
		logger.Error("maintenance", slog.Any("error", err))
		return
	}
	_ = r.Run(ctx) // until ctx is done
}

// The claim horizon must stay far beyond any lease.
func ExampleConfig_Validate() {
	fmt.Println(maintenance.Config{ClaimHorizon: 12 * time.Hour}.Validate())
	fmt.Println(maintenance.Config{Lease: 10 * time.Hour}.Validate())
	fmt.Println(maintenance.Config{ClaimHorizon: 42 * 24 * time.Hour, Lease: 10 * time.Hour}.Validate())
	// Output:
	// maintenance: invalid: ClaimHorizon 12h0m0s is under 24h0m0s: deleting a claim row restarts its fence, so the horizon must be far beyond any lease
	// maintenance: invalid: ClaimHorizon 720h0m0s is under 100 x Lease 10h0m0s: deleting a claim row restarts its fence, so the horizon must be far beyond any lease
	// <nil>
}
