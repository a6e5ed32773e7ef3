package pgsink

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload/pgsink/pgtest"
)

// startPostgres starts a throwaway server for t (pgtest) and returns a
// pool on its database, with the Sink's tables.
func startPostgres(t *testing.T) *pgxpool.Pool {
	t.Helper()
	_, db := startServer(t)
	return db
}

// startServer is startPostgres that also returns the server, to stop and
// start it again.
func startServer(t *testing.T) (*pgtest.Server, *pgxpool.Pool) {
	t.Helper()
	srv, db := pgtest.Start(t)
	if err := CreateSchema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return srv, db
}
