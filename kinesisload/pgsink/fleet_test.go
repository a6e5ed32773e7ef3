package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// The tests of this file deliver hand-made batches of one shard: record i
// has sequence number seqOf(i) and data "r-<i>".

const shard0 = "shardId-000000000000"

func seqOf(i int) string { return strconv.Itoa(1000 + 10*i) }

func fleetRecord(i int) kinesisload.Record {
	return kinesisload.Record{Data: fmt.Appendf(nil, "r-%03d", i), PartitionKey: "k", SequenceNumber: seqOf(i),
		ArrivalTime: time.UnixMilli(1700000000000)}
}

// fleetBatch is the batch of records from to to (inclusive) of shard at
// epoch, with its checkpoint after the last.
func fleetBatch(shard string, epoch uint64, from, to int) kinesisload.Batch {
	b := kinesisload.Batch{Stream: streamName, ShardID: shard, Epoch: epoch, Checkpoint: scan.AfterSequence(seqOf(to))}
	for i := from; i <= to; i++ {
		b.Records = append(b.Records, fleetRecord(i))
	}
	return b
}

// span returns the data of records from to to (inclusive).
func span(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("r-%03d", i))
	}
	return out
}

// shardRows returns the data of shard's rows in sequence order, one entry
// per row (a record stored twice shows twice).
func shardRows(t *testing.T, db *pgxpool.Pool, shard string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT convert_from(data, 'UTF8') FROM tidemark_records WHERE stream = $1 AND shard = $2 ORDER BY seq::numeric, subseq`,
		streamName, shard)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		return nil // as span of nothing
	}
	return out
}

// storedCheckpoint returns shard's checkpoint and epoch.
func storedCheckpoint(t *testing.T, db *pgxpool.Pool, shard string) (string, uint64) {
	t.Helper()
	var pos string
	var epoch int64
	if err := db.QueryRow(context.Background(), `SELECT position, epoch FROM tidemark_checkpoints WHERE stream = $1 AND shard = $2`,
		streamName, shard).Scan(&pos, &epoch); err != nil {
		t.Fatalf("the checkpoint of %s: %v", shard, err)
	}
	return pos, uint64(epoch)
}

// checkShard asserts shard's rows, checkpoint and epoch.
func checkShard(t *testing.T, db *pgxpool.Pool, shard string, rows []string, cp scan.Position, epoch uint64) {
	t.Helper()
	if diff := cmp.Diff(rows, shardRows(t, db, shard)); diff != "" {
		t.Errorf("rows of %s (-want +got):\n%s", shard, diff)
	}
	gotCP, gotEpoch := storedCheckpoint(t, db, shard)
	if gotCP != cp.String() || gotEpoch != epoch {
		t.Errorf("checkpoint of %s = %s at epoch %d, want %v at epoch %d", shard, gotCP, gotEpoch, cp, epoch)
	}
}

// checkDeliverErr asserts that err is nil when want is, and wraps want and
// names the shard otherwise.
func checkDeliverErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("Deliver = %v, want nil", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("Deliver = %v, want an error wrapping %q", err, want)
	case err != nil && !strings.Contains(err.Error(), "shard "+shard0):
		t.Errorf("error %q does not name the shard", err)
	}
}

// TestFleetZombie: Sinks on one database, the first owner of a shard's
// lease (epoch 1), which becomes a zombie, and the new owners (epochs 2
// and 3) whose leases lag the database. A new owner stores only what the
// old one did not; a zombie is refused with ErrLeaseLost and stores
// nothing, also once a new owner delivered only batches stored already; a
// batch stored already, or a start batch, stores nothing; within one lease
// an overlap is an error.
func TestFleetZombie(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	owner, newOwner, third := testSinkOf(db), testSinkOf(db), testSinkOf(db)
	after := func(i int) scan.Position { return scan.AfterSequence(seqOf(i)) }
	steps := []struct {
		name    string
		s       *Sink
		b       kinesisload.Batch
		wantErr error
		rows    []string
		cp      scan.Position
		epoch   uint64
	}{
		{"owner at epoch 1 stores P0..P1", owner, fleetBatch(shard0, 1, 0, 1), nil, span(0, 1), after(1), 1},
		{"new owner at epoch 2 delivers P0..P2: only P2 stored", newOwner, fleetBatch(shard0, 2, 0, 2), nil, span(0, 2), after(2), 2},
		{"zombie at epoch 1 delivers its next batch P2..P3: fenced", owner, fleetBatch(shard0, 1, 2, 3), kinesisload.ErrLeaseLost, span(0, 2), after(2), 2},
		{"zombie at epoch 1 delivers P1..P3: fenced", owner, fleetBatch(shard0, 1, 1, 3), kinesisload.ErrLeaseLost, span(0, 2), after(2), 2},
		{"zombie re-delivers P0..P1, stored already: no-op", owner, fleetBatch(shard0, 1, 0, 1), nil, span(0, 2), after(2), 2},
		{"new owner re-delivers P0..P2 (lost COMMIT answer): no-op", newOwner, fleetBatch(shard0, 2, 0, 2), nil, span(0, 2), after(2), 2},
		{"a start batch for a shard with a checkpoint: no-op", owner,
			kinesisload.Batch{Stream: streamName, ShardID: shard0, Checkpoint: scan.TrimHorizon()}, nil, span(0, 2), after(2), 2},
		{"new owner's next batch P3..P4", newOwner, fleetBatch(shard0, 2, 3, 4), nil, span(0, 4), after(4), 2},
		{"new owner overlapping its own checkpoint: error", newOwner, fleetBatch(shard0, 2, 4, 5), ErrOverlap, span(0, 4), after(4), 2},
		{"third owner at epoch 3, lagging by more than a batch: no record, its epoch", third, fleetBatch(shard0, 3, 1, 2), nil, span(0, 4), after(4), 3},
		{"second owner's next batch P5, right after the checkpoint: fenced by the third's epoch", newOwner, fleetBatch(shard0, 2, 5, 5), kinesisload.ErrLeaseLost, span(0, 4), after(4), 3},
		{"third owner's next batch P3..P6: only P5..P6 stored", third, fleetBatch(shard0, 3, 3, 6), nil, span(0, 6), after(6), 3},
		{"second owner, now a zombie too, at epoch 2: fenced", newOwner, fleetBatch(shard0, 2, 5, 7), kinesisload.ErrLeaseLost, span(0, 6), after(6), 3},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			checkDeliverErr(t, st.s.Deliver(ctx, st.b), st.wantErr)
			checkShard(t, db, shard0, st.rows, st.cp, st.epoch)
		})
	}
}

// TestFleetNewOwnerAfterStart: a new owner's first batch after a stored
// start (a start batch, epoch 0) is stored whole when the start is before
// every record (TRIM_HORIZON), and from the start's record on when it is
// AT_SEQUENCE_NUMBER.
func TestFleetNewOwnerAfterStart(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	s := testSinkOf(db)
	for _, tt := range []struct {
		shard string
		start scan.Position
		b     kinesisload.Batch
		rows  []string
	}{
		{"shardId-000000000001", scan.TrimHorizon(), fleetBatch("shardId-000000000001", 1, 0, 2), span(0, 2)},
		{"shardId-000000000002", scan.AtSequence(seqOf(1)), fleetBatch("shardId-000000000002", 1, 1, 2), span(1, 2)},
	} {
		if err := s.Deliver(ctx, kinesisload.Batch{Stream: streamName, ShardID: tt.shard, Checkpoint: tt.start}); err != nil {
			t.Fatalf("start batch of %s: %v", tt.shard, err)
		}
		checkShard(t, db, tt.shard, nil, tt.start, 0)
		if err := s.Deliver(ctx, tt.b); err != nil {
			t.Fatalf("first batch of %s after %v: %v", tt.shard, tt.start, err)
		}
		checkShard(t, db, tt.shard, tt.rows, tt.b.Checkpoint, 1)
	}
}

// waitForLockWaiter waits until a backend of db waits for a lock: the
// other Deliver blocked on the shard's checkpoint row.
func waitForLockWaiter(ctx context.Context, db *pgxpool.Pool) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the other Deliver never waited for the shard's row lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetConcurrentDeliver: the zombie (epoch 1) and the new owner
// (epoch 2) deliver at the same moment: the one that locks the shard's row
// first holds the other until it commits, whichever it is, and every
// record is stored once.
func TestFleetConcurrentDeliver(t *testing.T) {
	for _, first := range []string{"zombie", "new owner"} {
		t.Run(first+" first", func(t *testing.T) {
			db := startPostgres(t)
			ctx := context.Background()
			if err := testSinkOf(db).Deliver(ctx, fleetBatch(shard0, 1, 0, 1)); err != nil {
				t.Fatal(err)
			}
			zombie, newOwner := testSinkOf(db), testSinkOf(db)
			zb, nb := fleetBatch(shard0, 1, 2, 5), fleetBatch(shard0, 2, 0, 4)
			firstSink, firstBatch, secondSink, secondBatch := zombie, zb, newOwner, nb
			if first == "new owner" {
				firstSink, firstBatch, secondSink, secondBatch = newOwner, nb, zombie, zb
			}
			secondErr := make(chan error, 1)
			firstSink.afterLock = func(ctx context.Context, _ pgx.Tx, _ kinesisload.Batch) error {
				go func() { secondErr <- secondSink.Deliver(context.Background(), secondBatch) }()
				return waitForLockWaiter(ctx, db)
			}
			err1 := firstSink.Deliver(ctx, firstBatch)
			err2 := <-secondErr
			errs := map[*Sink]error{firstSink: err1, secondSink: err2}
			if errs[newOwner] != nil {
				t.Errorf("the new owner's Deliver = %v, want nil", errs[newOwner])
			}
			if first == "zombie" {
				// The zombie stored P2..P5 at epoch 1; the new owner's
				// P0..P4 was stored already, and fenced the zombie.
				if errs[zombie] != nil {
					t.Errorf("the zombie's Deliver = %v, want nil", errs[zombie])
				}
				checkShard(t, db, shard0, span(0, 5), zb.Checkpoint, 2)
				if err := zombie.Deliver(ctx, fleetBatch(shard0, 1, 6, 6)); !errors.Is(err, kinesisload.ErrLeaseLost) {
					t.Errorf("the zombie's next batch: Deliver = %v, want ErrLeaseLost", err)
				}
			} else {
				// The new owner stored P2..P4 at epoch 2; the zombie's
				// P2..P5 goes further at a lower epoch: fenced.
				if !errors.Is(errs[zombie], kinesisload.ErrLeaseLost) {
					t.Errorf("the zombie's Deliver = %v, want ErrLeaseLost", errs[zombie])
				}
				checkShard(t, db, shard0, span(0, 4), nb.Checkpoint, 2)
			}
			// The new owner goes on from its own checkpoint.
			if err := newOwner.Deliver(ctx, fleetBatch(shard0, 2, 5, 6)); err != nil {
				t.Fatal(err)
			}
			checkShard(t, db, shard0, span(0, 6), scan.AfterSequence(seqOf(6)), 2)
		})
	}
}

// TestFleetConcurrentFirstBatch: two owners deliver the first batch of a
// shard that has no checkpoint row at the same moment; the row the first
// creates holds the second, which then stores only what is new. Also on a
// server whose default isolation is REPEATABLE READ, where the second's
// SELECT would not see the row that its INSERT found.
func TestFleetConcurrentFirstBatch(t *testing.T) {
	for _, isolation := range []string{"read committed", "repeatable read"} {
		t.Run(isolation, func(t *testing.T) {
			db := startPostgres(t)
			ctx := context.Background()
			if _, err := db.Exec(ctx, `ALTER DATABASE tidemark_test SET default_transaction_isolation = '`+isolation+`'`); err != nil {
				t.Fatal(err)
			}
			db, err := pgxpool.New(ctx, db.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			zombie, newOwner := testSinkOf(db), testSinkOf(db)
			secondErr := make(chan error, 1)
			zombie.afterLock = func(ctx context.Context, _ pgx.Tx, _ kinesisload.Batch) error {
				go func() { secondErr <- newOwner.Deliver(context.Background(), fleetBatch(shard0, 2, 0, 3)) }()
				return waitForLockWaiter(ctx, db)
			}
			if err := zombie.Deliver(ctx, fleetBatch(shard0, 1, 0, 1)); err != nil {
				t.Fatalf("the first owner's Deliver: %v", err)
			}
			if err := <-secondErr; err != nil {
				t.Fatalf("the new owner's Deliver: %v", err)
			}
			checkShard(t, db, shard0, span(0, 3), scan.AfterSequence(seqOf(3)), 2)
		})
	}
}

// TestFleetZombieRace: per shard, an owner at epoch 1 stores records 0..8
// and goes on as a zombie, while a new owner at epoch 2 resumes from a
// table that lags (after record 2) and delivers to the end, both at once,
// in batches of different sizes. The new owner's every Deliver succeeds;
// the zombie's succeed until one is refused with ErrLeaseLost (it then
// stops, as the Loader does); every record is stored exactly once.
func TestFleetZombieRace(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	const n, zombieEnd = 60, 50
	var wg sync.WaitGroup
	for round := range 6 {
		shard := fmt.Sprintf("shardId-%012d", round)
		owner, newOwner := testSinkOf(db), testSinkOf(db)
		for i := 0; i < 9; i += 3 {
			if err := owner.Deliver(ctx, fleetBatch(shard, 1, i, i+2)); err != nil {
				t.Fatal(err)
			}
		}
		// deliverAll delivers records from..end-1; a zombie stops at
		// its first ErrLeaseLost.
		deliverAll := func(s *Sink, epoch uint64, from, end, size int) error {
			for i := from; i < end; i += size {
				err := s.Deliver(ctx, fleetBatch(shard, epoch, i, min(i+size, end)-1))
				if epoch == 1 && errors.Is(err, kinesisload.ErrLeaseLost) {
					return nil
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := deliverAll(owner, 1, 9, zombieEnd, 2+round%2); err != nil {
				t.Errorf("%s: the zombie: %v", shard, err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := deliverAll(newOwner, 2, 3, n, 4+round%3); err != nil {
				t.Errorf("%s: the new owner: %v", shard, err)
			}
		}()
	}
	wg.Wait()
	for round := range 6 {
		checkShard(t, db, fmt.Sprintf("shardId-%012d", round), span(0, n-1), scan.AfterSequence(seqOf(n-1)), 2)
	}
}
