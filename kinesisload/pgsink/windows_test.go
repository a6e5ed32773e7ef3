package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// windowLog counts the windows a Loader delivered and the shards in each.
type windowLog struct {
	mu      sync.Mutex
	windows []kinesisload.WindowDelivered
}

func (h *windowLog) OnWindowDelivered(e kinesisload.WindowDelivered) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.windows = append(h.windows, e)
}

func (h *windowLog) maxShards() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.windows {
		n = max(n, w.Shards)
	}
	return n
}

// Windows across shards: a Loader given the Sink itself (a MultiSink)
// stores windows of many shards, each in one transaction with one COPY,
// and every record lands exactly once with each shard's checkpoint after
// its last record.
func TestWindowsExactlyOnce(t *testing.T) {
	db := startPostgres(t)
	f := newStream(t, 8)
	want := put(t, f, "", "r", 400)
	sink := testSinkOf(db)
	hk := &windowLog{}
	r := startLoader(t, f, windowConfig(sink, 10, 200), newJournalStore(t, journal.NewMemory()), hk)
	waitCount(t, db, r, len(want))
	r.stop(t)
	checkExactlyOnce(t, db, want)
	if got := checkpoints(t, sink); fmt.Sprint(got) != fmt.Sprint(lastCheckpoints(want)) {
		t.Errorf("Checkpoints = %v, want %v", got, lastCheckpoints(want))
	}
	if n := hk.maxShards(); n < 2 {
		t.Errorf("the largest window held %d shards, want several", n)
	}
}

// A crash in the middle of a window's transaction (after its COPY, before
// its COMMIT), and one after the COMMIT and before the Loader journals the
// window: nothing of the first window is stored, all of the second is,
// and a Loader on what survived stores every record exactly once.
func TestWindowsCrash(t *testing.T) {
	for _, when := range []string{"before COMMIT", "after COMMIT"} {
		t.Run(when, func(t *testing.T) {
			db := startPostgres(t)
			f := newStream(t, 4)
			want := put(t, f, "", "r", 120)
			inner := journal.NewMemory()
			proc := &process{}
			sink1 := &testSink{Sink: testSinkOf(db), p: proc}
			var (
				mu       sync.Mutex
				txs      = map[pgx.Tx]bool{}
				crashed  []kinesisload.Batch
				done     atomic.Bool
				commitsN atomic.Int32
			)
			crash := func(b kinesisload.Batch) {
				crashed = append(crashed, b)
				proc.die()
			}
			if when == "before COMMIT" {
				sink1.afterInsert = func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					if done.Load() {
						return errCrash
					}
					if len(b.Records) == 0 {
						return nil // a start batch
					}
					txs[tx] = true
					if len(txs) == 3 { // the third window of records
						crash(b)
						done.Store(true)
						return errCrash
					}
					return nil
				}
			} else {
				sink1.afterCommit = func(ctx context.Context, b kinesisload.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					if len(b.Records) > 0 && commitsN.Add(1) >= 5 && !done.Load() {
						crash(b)
						done.Store(true)
					}
					if done.Load() {
						return errCrash
					}
					return nil
				}
			}
			cfg := windowConfig(sink1, 5, 20)
			cfg.SinkRetries = kinesisload.SinkNoRetries
			r1 := startLoader(t, f, cfg, newJournalStore(t, &crashJournal{Journal: inner, p: proc}))
			r1.crashed(t)
			before := count(t, db)
			if before == 0 || before >= len(want) {
				t.Fatalf("%d rows stored before the restart; the crash should come after some windows and before the last", before)
			}
			if when == "before COMMIT" {
				var left int
				if err := db.QueryRow(context.Background(), `SELECT count(*) FROM tidemark_records WHERE stream = $1 AND shard = $2 AND seq = ANY($3)`,
					streamName, crashed[0].ShardID, seqs(crashed[0])).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left != 0 {
					t.Fatalf("%d rows of the window that crashed before its COMMIT are stored", left)
				}
			}
			sink2 := testSinkOf(db)
			r2 := startLoader(t, f, windowConfig(sink2, 5, 20), newJournalStore(t, inner))
			waitCount(t, db, r2, len(want))
			r2.stop(t)
			checkExactlyOnce(t, db, want)
		})
	}
}

// A database outage does not stop the Loader: while the server is down
// every window is refused with a transient error and retried (the Loader
// shows it in Stats); once it is back every record is stored exactly
// once, and Run never returned.
func TestDatabaseOutageIsWaitedOut(t *testing.T) {
	srv, db := startServer(t)
	f := newStream(t, 4)
	want := put(t, f, "", "r", 40)
	sink := testSinkOf(db)
	cfg := windowConfig(sink, 10, 100)
	cfg.SinkMaxBackoff = 500 * time.Millisecond
	r := startLoader(t, f, cfg, newJournalStore(t, journal.NewMemory()))
	waitCount(t, db, r, len(want))
	srv.Stop(t)
	want = append(want, put(t, f, "", "outage", 40)...)
	deadline := time.Now().Add(20 * time.Second)
	for r.l.Stats().Retries < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the Loader did not retry while the database was down: Stats %+v", r.l.Stats())
		}
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			t.Fatalf("Run returned %v during the outage", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	srv.Restart(t)
	waitCount(t, db, r, len(want))
	r.stop(t)
	checkExactlyOnce(t, db, want)
}

// CreateSchema on tables that are up to date runs no DDL and takes no
// lock: it returns while another host's Deliver holds its transaction
// open (an ALTER TABLE would wait for that transaction, and deadlocked
// with it: 40P01).
func TestCreateSchemaTakesNoLockWhenUpToDate(t *testing.T) {
	db := startPostgres(t)
	s := testSinkOf(db)
	inTx, release := make(chan struct{}), make(chan struct{})
	s.afterInsert = func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error {
		close(inTx)
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return nil
	}
	delivered := make(chan error, 1)
	go func() { delivered <- s.Deliver(context.Background(), fleetBatch(shard0, 1, 0, 3)) }()
	<-inTx
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := CreateSchema(ctx, db)
	cancel()
	close(release)
	if err != nil {
		t.Errorf("CreateSchema while a Deliver holds its transaction = %v, want nil at once", err)
	}
	if err := <-delivered; err != nil {
		t.Errorf("Deliver = %v", err)
	}
}

// CreateSchema waits for a database that is down (a host that starts
// during an outage), and returns once the database is back.
func TestCreateSchemaWaitsForTheDatabase(t *testing.T) {
	srv, db := startServer(t)
	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- CreateSchema(ctx, db) }()
	select {
	case err := <-done:
		t.Fatalf("CreateSchema returned %v while the database was down", err)
	case <-time.After(time.Second):
	}
	srv.Restart(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CreateSchema = %v after the database came back", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("CreateSchema did not return after the database came back")
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	srv.Stop(t)
	if err := CreateSchema(short, db); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateSchema with a database down and a context that ends = %v, want an error wrapping the context's", err)
	}
	srv.Restart(t)
}

// A host frozen inside its transaction (its session idle in transaction,
// or waiting in a statement) holds the shard's row lock only until the
// server ends the transaction (Config's timeouts): the shard's new owner
// then stores its batch; the frozen host's Deliver fails with a transient
// error (the Loader retries it, and the Sink fences it by epoch).
func TestTimeoutsFreeAFrozenHostsLock(t *testing.T) {
	for _, frozen := range []string{"idle in transaction", "in a statement"} {
		t.Run(frozen, func(t *testing.T) {
			db := startPostgres(t)
			ctx := context.Background()
			old, err := New(db, Config{StatementTimeout: 300 * time.Millisecond, IdleInTransactionTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Deliver(ctx, fleetBatch(shard0, 1, 0, 1)); err != nil {
				t.Fatal(err)
			}
			locked, thaw := make(chan struct{}), make(chan struct{}, 1)
			defer close(thaw)
			old.afterLock = func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error {
				close(locked)
				if frozen == "in a statement" {
					_, err := tx.Exec(ctx, `SELECT pg_sleep(10)`)
					return err
				}
				<-thaw // the process is frozen: nothing reaches the server
				return nil
			}
			oldErr := make(chan error, 1)
			go func() { oldErr <- old.Deliver(ctx, fleetBatch(shard0, 1, 2, 3)) }()
			<-locked
			began := time.Now()
			nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
			defer ncancel()
			if err := testSinkOf(db).Deliver(nctx, fleetBatch(shard0, 2, 2, 4)); err != nil {
				t.Fatalf("the new owner's Deliver = %v after %v: the frozen host's lock was not freed", err, time.Since(began))
			}
			if waited := time.Since(began); waited > 3*time.Second {
				t.Errorf("the new owner waited %v for the frozen host's lock, want about the timeout (300 ms)", waited)
			}
			if frozen == "idle in transaction" {
				thaw <- struct{}{}
			}
			err = <-oldErr
			if err == nil || errors.Is(err, kinesisload.ErrPermanent) {
				t.Errorf("the frozen host's Deliver = %v, want a transient error", err)
			}
			checkShard(t, db, shard0, span(0, 4), scan.AfterSequence(seqOf(4)), 2)
		})
	}
}

// Errors that no retry fixes are permanent; a refusal of a fenced shard
// is not (the Loader stops the shard as a lost lease), nor is a database
// that cannot be reached.
func TestErrorClasses(t *testing.T) {
	srv, db := startServer(t)
	s := testSinkOf(db)
	ctx := context.Background()
	if err := s.Deliver(ctx, fleetBatch(shard0, 2, 0, 2)); err != nil {
		t.Fatal(err)
	}
	overlap := s.Deliver(ctx, fleetBatch(shard0, 2, 1, 3))
	if !errors.Is(overlap, ErrOverlap) || !errors.Is(overlap, kinesisload.ErrPermanent) {
		t.Errorf("an overlap: Deliver = %v, want a permanent ErrOverlap", overlap)
	}
	fenced := s.DeliverMulti(ctx, []kinesisload.Batch{fleetBatch(shard0, 1, 3, 4), fleetBatch("shardId-000000000009", 1, 0, 0)})
	sf, ok := errors.AsType[*kinesisload.ShardsFencedError](fenced)
	if !ok || errors.Is(fenced, kinesisload.ErrPermanent) || len(sf.Shards) != 1 || sf.Shards[0] != shard0 {
		t.Errorf("a fenced shard in a window: DeliverMulti = %v, want a ShardsFencedError naming %s only, not permanent", fenced, shard0)
	}
	if !strings.Contains(fmt.Sprint(fenced), "a window of 2 batches") {
		t.Errorf("the error %q does not describe the window", fenced)
	}
	bad := fleetBatch(shard0, 3, 3, 3)
	bad.Records[0].PartitionKey = "nul\x00key" // text cannot hold NUL: an error of the data
	if err := s.Deliver(ctx, bad); err == nil || !errors.Is(err, kinesisload.ErrPermanent) {
		t.Errorf("a record the table cannot hold: Deliver = %v, want a permanent error", err)
	}
	srv.Stop(t)
	down := s.Deliver(ctx, fleetBatch(shard0, 3, 3, 3))
	if down == nil || errors.Is(down, kinesisload.ErrPermanent) {
		t.Errorf("the database down: Deliver = %v, want a transient error", down)
	}
	srv.Restart(t)
}

// New refuses what it cannot use.
func TestNewRefuses(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	db := startPostgres(t)
	for _, c := range []Config{{StatementTimeout: -1}, {IdleInTransactionTimeout: -time.Second}} {
		if _, err := New(db, c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	s, err := New(db, Config{})
	if err != nil || s.cfg.StatementTimeout != DefaultStatementTimeout || s.cfg.IdleInTransactionTimeout != DefaultIdleInTransactionTimeout {
		t.Errorf("New with the zero Config = %+v, %v; want the defaults", s, err)
	}
	if _, multi := s.PerShard().(kinesisload.MultiSink); multi {
		t.Error("PerShard is a MultiSink")
	}
}
