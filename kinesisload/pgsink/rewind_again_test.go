package pgsink

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/pgsink/pgtest"
	"github.com/tidemark/tidemark/scan"
)

// A closed shard's SHARD_END is stored in the Sink, but the journal (or
// the fleet's table) committed only an earlier position when the host
// died: the operator can rewind the shard there (it is not COMPLETED in
// the store). RewindCheckpoint must then keep what was stored up to the
// end as "stored already": the records delivered again must be taken
// once, not refused as duplicates for ever.
func TestARewindFromShardEndStoresWhatComesAgainOnce(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	s := testSinkOf(db)
	last := fleetBatch(shard0, 1, 0, 5)
	last.Checkpoint = scan.ShardEnd()
	if err := s.Deliver(ctx, last); err != nil {
		t.Fatal(err)
	}
	to := scan.AfterSequence(seqOf(2))
	if err := s.RewindCheckpoint(ctx, streamName, shard0, to, 2); err != nil {
		t.Fatalf("RewindCheckpoint: %v", err)
	}
	if err := s.Deliver(ctx, fleetBatch(shard0, 2, 3, 5)); err != nil {
		t.Fatalf("records 3 to 5 delivered again after a rewind from SHARD_END: %v", err)
	}
	end := kinesisload.Batch{Stream: streamName, ShardID: shard0, Epoch: 2, Checkpoint: scan.ShardEnd()}
	if err := s.Deliver(ctx, end); err != nil {
		t.Fatalf("the end of the shard again: %v", err)
	}
	checkShard(t, db, shard0, span(0, 5), scan.ShardEnd(), 2)
}

// A database that takes no writes for a while (a failover's old primary
// now a standby, a managed server turned read-only as its storage fills:
// default_transaction_read_only) answers 25006, read_only_sql_transaction.
// That is an outage, as a full disk (53100) is, which the Loader must
// wait out: not a permanent error that stops Run.
func TestAReadOnlyDatabaseIsTransient(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	s := testSinkOf(db)
	if _, err := db.Exec(ctx, "ALTER DATABASE "+pgtest.Database+" SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	db.Reset() // new connections take the setting
	err := s.Deliver(ctx, fleetBatch(shard0, 1, 0, 2))
	if err == nil {
		t.Fatal("Deliver to a read-only database = nil")
	}
	if errors.Is(err, kinesisload.ErrPermanent) {
		t.Errorf("Deliver to a read-only database = %v: permanent, want transient (retried until the database takes writes again)", err)
	}
}

// The same rewind with the Sink given as PerShard (a Loader that stores
// each shard's batches in transactions of their own): PerShard must stay
// a kinesisload.Rewinder, or the Loader stops with a RewindError, and the
// operator who then sets the checkpoint back by hand, as it says, meets
// ErrDuplicate for good.
func TestALoaderOfPerShardRewoundReadsTheShardAgain(t *testing.T) {
	loaderRewoundReadsTheShardAgain(t, (*Sink).PerShard)
}
