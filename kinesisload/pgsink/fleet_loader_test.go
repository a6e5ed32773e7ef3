package pgsink

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/coordtest"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// hostSink is one fleet host's Sink: before, when set, runs before each
// Deliver and returns the context the Deliver then runs with (a zombie's
// does not end with its lease); after, when set, is told each Deliver's
// result. Both are set before the host starts.
type hostSink struct {
	*Sink
	before func(ctx context.Context, b kinesisload.Batch) context.Context
	after  func(b kinesisload.Batch, err error)
}

func (s *hostSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	return s.DeliverMulti(ctx, []kinesisload.Batch{b})
}

// DeliverMulti runs before for each batch of the window, then the
// window's transaction, then after for each batch with its result.
func (s *hostSink) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	if s.before != nil {
		for _, b := range bs {
			ctx = s.before(ctx, b)
		}
	}
	err := s.Sink.DeliverMulti(ctx, bs)
	if s.after != nil {
		for _, b := range bs {
			s.after(b, err)
		}
	}
	return err
}

// pgFleet is Loaders sharing one stream through an in-memory fleet
// (coordtest) whose time runs on its own goroutine, each with its own Sink
// on one database.
type pgFleet struct {
	t     *testing.T
	fake  *kinesistest.Fake
	fleet *coordtest.Fleet
	db    *pgxpool.Pool
	runs  map[string]*loaderRun
	// windows makes every host's Loader deliver windows (MaxBatchRecords
	// the host's records a call) to its Sink's DeliverMulti.
	windows bool

	mu      sync.Mutex
	gates   []*gate
	release sync.Once
}

// gate is a signal between a test and its hosts' Sinks, opened once.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

// gate returns a closed gate, opened when the test ends if nobody did, so
// that no Sink waits for it forever.
func (pf *pgFleet) gate() *gate {
	g := &gate{ch: make(chan struct{})}
	pf.mu.Lock()
	pf.gates = append(pf.gates, g)
	pf.mu.Unlock()
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait waits for g to open, failing after a while with what.
func (g *gate) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// releaseAll opens every gate and resumes every host: a test that failed
// half-way leaves no Loader blocked.
func (pf *pgFleet) releaseAll() {
	pf.release.Do(func() {
		pf.mu.Lock()
		defer pf.mu.Unlock()
		for _, g := range pf.gates {
			g.open()
		}
		for id := range pf.runs {
			pf.fleet.Resume(id)
		}
	})
}

func newPGFleet(t *testing.T, db *pgxpool.Pool, f *kinesistest.Fake) *pgFleet {
	fl, err := coordtest.New(coordtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pf := &pgFleet{t: t, fake: f, fleet: fl, db: db, runs: map[string]*loaderRun{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		renew := fl.Config().RenewInterval
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				fl.Advance(renew)
			}
		}
	})
	// Registered before the Loaders' cleanups, so it runs after them.
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	return pf
}

// start runs host with sink, reading recordsPerCall records a call.
func (pf *pgFleet) start(host string, sink kinesisload.TransactionalMultiSink, recordsPerCall int32, hooks ...kinesisload.Hook) *loaderRun {
	pf.t.Helper()
	cfg := testConfig(sink, recordsPerCall)
	if pf.windows {
		cfg = windowConfig(sink, recordsPerCall, int(recordsPerCall))
	}
	l, err := kinesisload.New(cfg, kinesisload.WithClient(pf.fake), kinesisload.WithCoordinator(pf.fleet.Host(host)),
		kinesisload.WithHooks(hooks...), kinesisload.WithLogger(testLogger().With("host", host)))
	if err != nil {
		pf.t.Fatal(err)
	}
	r := &loaderRun{l: l, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- l.Run(ctx) }()
	pf.t.Cleanup(func() {
		pf.releaseAll()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = l.Close(cctx)
		cancel()
		err := <-r.done
		pf.t.Logf("host %s: Run = %v", host, err)
	})
	pf.mu.Lock()
	pf.runs[host] = r
	pf.mu.Unlock()
	return r
}

// waitRows waits until the stream has n rows, failing early if the Run
// of one of hosts returns.
func (pf *pgFleet) waitRows(n int, hosts ...string) {
	pf.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := count(pf.t, pf.db)
		if got == n {
			return
		}
		if got > n {
			pf.t.Fatalf("%d rows, want %d", got, n)
		}
		for _, h := range hosts {
			pf.mu.Lock()
			r := pf.runs[h]
			pf.mu.Unlock()
			select {
			case err := <-r.done:
				r.done <- err
				pf.t.Fatalf("host %s stopped (%v) with %d of %d rows stored", h, err, got, n)
			default:
			}
		}
		if time.Now().After(deadline) {
			pf.t.Fatalf("timed out with %d of %d rows stored", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquiredHook opens its gate when the host acquires a lease.
type acquiredHook struct{ g *gate }

func (h acquiredHook) OnLeaseAcquired(kinesisload.LeaseAcquired) { h.g.open() }

// lostHook opens its gate when the host loses a lease for reason why.
type lostHook struct {
	g   *gate
	why kinesisload.LostReason
}

func (h lostHook) OnLeaseLost(e kinesisload.LeaseLost) {
	if e.Reason == h.why {
		h.g.open()
	}
}

// firstBatchOf returns a function that is true for the first batch it is
// given whose first record's data is data, and false for every other.
func firstBatchOf(data string) func(b kinesisload.Batch) bool {
	var seen atomic.Bool
	return func(b kinesisload.Batch) bool {
		return len(b.Records) > 0 && string(b.Records[0].Data) == data && seen.CompareAndSwap(false, true)
	}
}

// TestFleetLoadersZombie runs Loaders of a fleet (coordtest) on one
// PostgreSQL database, with two zombies: hosts paused past their lease in
// the middle of a Deliver, whose Deliver goes on when they wake up.
//
// Zombie z is paused before the transaction of its second batch (records
// 10 to 19); n takes the shard, and once it holds it z wakes up, stores
// its batch, and is paused again before committing it to the fleet's
// table: n, which resumed from the table (after record 9), is behind the
// database, and stores only what follows it. Then n is paused before the
// transaction of its next batch, and m takes the shard and stores the
// first record of that batch (m reads one record a call): when n wakes up,
// its batch, which goes further than m's checkpoint at a lower epoch, is
// refused with ErrLeaseLost and stores nothing, and n stops the shard as a
// lost lease of reason LostSinkFenced. Every record is stored exactly
// once.
//
// It runs with pages delivered one by one (Deliver), and with windows
// (DeliverMulti, a window of a page: the same batches), where the zombie
// n's refusal is a ShardsFencedError.
func TestFleetLoadersZombie(t *testing.T) {
	for _, windows := range []bool{false, true} {
		name := "pages"
		if windows {
			name = "windows"
		}
		t.Run(name, func(t *testing.T) { fleetLoadersZombie(t, windows) })
	}
}

func fleetLoadersZombie(t *testing.T, windows bool) {
	db := startPostgres(t)
	f := newStream(t, 1)
	shard := listShards(t, f)[0]
	want := put(t, f, shard, "r", 30)
	pf := newPGFleet(t, db, f)
	pf.windows = windows

	// z pauses before its second batch, goes on once n holds the shard.
	zPaused, zStored, nAcquired := pf.gate(), pf.gate(), pf.gate()
	var zErr error
	zZombie, zZombieDone := firstBatchOf("r-010"), firstBatchOf("r-010")
	z := &hostSink{Sink: testSinkOf(db)}
	z.before = func(ctx context.Context, b kinesisload.Batch) context.Context {
		if !zZombie(b) {
			return ctx
		}
		pf.fleet.Pause("z")
		zPaused.open()
		<-nAcquired.ch
		return context.WithoutCancel(ctx)
	}
	var zEpoch atomic.Uint64 // z's lease: n's and m's are above it
	z.after = func(b kinesisload.Batch, err error) {
		zEpoch.CompareAndSwap(0, b.Epoch)
		if zZombieDone(b) {
			zErr = err
			zStored.open()
		}
	}
	pf.start("z", z, 10)
	zPaused.wait(t, "z's second batch")

	// n takes the shard once z's lease expired; its first batch waits
	// until z stored its own. Later, its first batch of the records put
	// next is paused before its transaction, and its result recorded.
	nPaused, nRelease, nDone := pf.gate(), pf.gate(), pf.gate()
	var nErr error
	nFirst, nZombie, nZombieDone := firstBatchOf("r-010"), firstBatchOf("r2-000"), firstBatchOf("r2-000")
	var nGotStored atomic.Bool // n was given a record z had stored
	n := &hostSink{Sink: testSinkOf(db)}
	n.before = func(ctx context.Context, b kinesisload.Batch) context.Context {
		switch {
		case nFirst(b):
			<-zStored.ch
		case nZombie(b):
			pf.fleet.Pause("n")
			nPaused.open()
			<-nRelease.ch
			return context.WithoutCancel(ctx)
		}
		return ctx
	}
	var nEpoch atomic.Uint64 // n's lease
	n.after = func(b kinesisload.Batch, err error) {
		nEpoch.CompareAndSwap(0, b.Epoch)
		for _, r := range b.Records {
			if string(r.Data) == "r-015" {
				nGotStored.Store(true)
			}
		}
		if nZombieDone(b) {
			nErr = err
			nDone.open()
		}
	}
	nFenced := pf.gate()
	pf.start("n", n, 3, acquiredHook{nAcquired}, lostHook{nFenced, kinesisload.LostSinkFenced})
	zStored.wait(t, "z's Deliver")
	pf.waitRows(len(want), "n")
	if zErr != nil {
		t.Errorf("the zombie z's Deliver, in order at its epoch = %v, want nil", zErr)
	}
	checkExactlyOnce(t, db, want)
	if _, epoch := storedCheckpoint(t, db, shard); epoch != nEpoch.Load() || epoch <= zEpoch.Load() {
		t.Errorf("epoch of %s's checkpoint = %d, want n's lease's %d, above z's %d", shard, epoch, nEpoch.Load(), zEpoch.Load())
	}
	if !nGotStored.Load() {
		t.Error("n was never given a record z had stored: the test did not exercise a table behind the database")
	}
	// z would commit its batch to the fleet when it wakes: it is refused.
	// Kill it, so that it does not take the shard back in the next phase.
	pf.fleet.Kill("z")

	// n reads the next records and pauses in the Deliver of its first
	// batch of them; m takes the shard, stores one record (it reads one a
	// call), and waits.
	mStored, mRelease := pf.gate(), pf.gate()
	m := testSinkOf(db)
	var mEpoch atomic.Uint64 // m's lease
	m.afterCommit = func(ctx context.Context, b kinesisload.Batch) error {
		if len(b.Records) > 0 {
			mEpoch.CompareAndSwap(0, b.Epoch)
			mStored.open()
			<-mRelease.ch
		}
		return nil
	}
	more := put(t, f, shard, "r2", 15)
	nPaused.wait(t, "n's batch of the new records")
	pf.start("m", m, 1)
	mStored.wait(t, "m's first batch")
	if cp, epoch := storedCheckpoint(t, db, shard); cp != scan.AfterSequence(more[0].Seq).String() || epoch != mEpoch.Load() || epoch <= nEpoch.Load() {
		t.Fatalf("%s's checkpoint after m's first batch = %s at epoch %d, want after %s at m's lease's epoch %d, above n's %d", shard, cp, epoch, more[0].Seq, mEpoch.Load(), nEpoch.Load())
	}
	// n wakes up in its Deliver: its batch (r2-000 to r2-002 at n's
	// epoch) goes further than m's checkpoint (r2-000 at m's, the next).
	nRelease.open()
	nDone.wait(t, "n's Deliver")
	if !errors.Is(nErr, kinesisload.ErrLeaseLost) {
		t.Errorf("the zombie n's Deliver = %v, want ErrLeaseLost", nErr)
	}
	checkExactlyOnce(t, db, append(want, more[0]))
	// n stops the shard as a lease the Sink fenced (n is still paused: the
	// fleet cannot have told it), and goes on running.
	nFenced.wait(t, "n's lease lost for sink_fenced")
	pf.fleet.Resume("n")
	mRelease.open()
	want = append(want, more...)
	pf.waitRows(len(want), "m", "n")
	checkExactlyOnce(t, db, want)
}
