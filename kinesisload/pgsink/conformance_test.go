package pgsink

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
)

// pgHarness is the conformance suite's view of one database: each host has
// a Sink of its own on the pool, as each process of a fleet has.
type pgHarness struct{ db *pgxpool.Pool }

func (h pgHarness) Sink(string) kinesisload.TransactionalSink { return testSinkOf(h.db) }

func (h pgHarness) Stored(ctx context.Context, stream, shard string) ([]kinesisload.Record, error) {
	rows, err := h.db.Query(ctx,
		`SELECT seq, subseq, partition_key, data FROM tidemark_records WHERE stream = $1 AND shard = $2`, stream, shard)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (kinesisload.Record, error) {
		var r kinesisload.Record
		err := row.Scan(&r.SequenceNumber, &r.SubSequenceNumber, &r.PartitionKey, &r.Data)
		return r, err
	})
}

// The Sink keeps the TransactionalSink contract (with its sooner fence,
// which the suite accepts): the conformance suite of sinktest on one
// database, each case on a stream of its own.
func TestConformance(t *testing.T) {
	db := startPostgres(t)
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return pgHarness{db} })
}
