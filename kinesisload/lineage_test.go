package kinesisload

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// The reviewer's finding in the seed: shard A's scan is pending and A is
// split meanwhile. No record may be delivered and no consume loop may start
// (for A, which is now CLOSED, or its children) until the batch is
// journaled; then A is read to its end before its children.
func TestNoLoopWhileScanPendingAcrossSplit(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	ih := newInitHook()

	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard0, Nth: 1, Block: release, Entered: entered})
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store), WithHooks(ih, rec))
	<-entered // the scan of A is in flight

	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "child-"+c)
	}
	iterCalls := s.f.Calls(kinesistest.OpGetShardIterator)
	time.Sleep(300 * time.Millisecond) // scheduling rounds would run here if the gate leaked

	if got := rec.events(); len(got) != 0 {
		t.Fatalf("while the batch was pending: %d events, first %+v", len(got), got[0])
	}
	if got := s.f.Calls(kinesistest.OpGetShardIterator); got != iterCalls {
		t.Fatalf("GetShardIterator calls went from %d to %d while the batch was pending: a loop started", iterCalls, got)
	}
	if p, _ := store.Load(context.Background(), s.name); len(p) != 0 {
		t.Fatalf("progress published before the batch was resolved: %v", p)
	}

	close(release)
	ih.wait(t)
	rec.waitFor(t, "child-"+children[0], "child-"+children[1])
	r.stop(t)

	evs := rec.events()
	completed := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == shard0 && e.state == StateCompleted })
	if completed < 0 {
		t.Fatalf("A never completed: %+v", evs)
	}
	for _, c := range children {
		pending := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == c && e.state == StatePendingParent })
		active := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == c && e.state == StateActive })
		if pending < 0 || pending > completed || active < completed {
			t.Errorf("child %s: PENDING_PARENT at %d, ACTIVE at %d, A COMPLETED at %d; want pending before and active after", c, pending, active, completed)
		}
	}
	for i, e := range evs {
		if e.kind == "deliver" && e.shard != shard0 && i < completed {
			t.Errorf("child record %q delivered at %d, before A completed at %d", e.data, i, completed)
		}
		if e.kind == "deliver" && e.data == "history" {
			t.Errorf("history before LATEST delivered")
		}
	}
	p, _ := store.Load(context.Background(), s.name)
	if got := p[shard0]; got.State != StateCompleted || got.Position.Kind != scan.KindShardEnd {
		t.Errorf("A's progress = %+v, want COMPLETED at SHARD_END", got)
	}
}

// gateStore blocks the first Save until released: the batch is resolved
// but not yet durable.
type gateStore struct {
	PositionStore
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gateStore) Save(ctx context.Context, stream string, u []ShardProgress) error {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.PositionStore.Save(ctx, stream, u)
}

// The same gate, held at the journal write itself: the batch has been
// resolved, A gets a record and is split, and still nothing is read until
// the batch is durable. Then A's remaining record comes before its
// children's.
func TestNoLoopUntilBatchIsDurable(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	g := &gateStore{PositionStore: memStore(t, journal.NewMemory()), entered: make(chan struct{}), release: make(chan struct{})}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(g), WithHooks(rec))
	<-g.entered
	s.put(shard0, "A-after-tip")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "child-"+c)
	}
	calls := s.f.Calls(kinesistest.OpGetShardIterator)
	time.Sleep(300 * time.Millisecond)
	if got := rec.events(); len(got) != 0 {
		t.Fatalf("events before the batch was durable: %+v", got)
	}
	if got := s.f.Calls(kinesistest.OpGetShardIterator); got != calls {
		t.Fatalf("a loop asked for an iterator before the batch was durable (%d -> %d calls)", calls, got)
	}
	close(g.release)
	rec.waitFor(t, "A-after-tip", "child-"+children[0], "child-"+children[1])
	r.stop(t)
	got := rec.delivered()
	if got[0] != "A-after-tip" {
		t.Errorf("delivery order %q: A's remaining record must come first", got)
	}
	if slices.Contains(got, "history") {
		t.Errorf("history before the resolved tip was delivered: %q", got)
	}
}

// After a merge the child waits for both parents, even when one parent is
// much slower than the other.
func TestMergeChildWaitsForBothParents(t *testing.T) {
	s := newFakeStream(t, 2)
	for i := range 3 {
		s.put(shard0, "p0-"+string(rune('a'+i)))
		s.put(shard1, "p1-"+string(rune('a'+i)))
	}
	s.merge(shard0, shard1)
	child := s.openShards()[0]
	s.put(child, "child-1")
	s.put(child, "child-2")

	rec := newRecorder()
	rec.fail = func(b Batch) error {
		if b.ShardID == shard1 {
			time.Sleep(50 * time.Millisecond) // the slow parent
		}
		return nil
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 1},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(rec))
	rec.waitFor(t, "child-1", "child-2")
	r.stop(t)

	evs := rec.events()
	lastParent, firstChild := -1, -1
	for i, e := range evs {
		switch {
		case e.kind == "state" && e.state == StateCompleted && (e.shard == shard0 || e.shard == shard1):
			lastParent = max(lastParent, i)
		case e.kind == "deliver" && e.shard == child && firstChild < 0:
			firstChild = i
		}
	}
	if lastParent < 0 || firstChild < lastParent {
		t.Fatalf("child's first record at %d, last parent completion at %d: %+v", firstChild, lastParent, evs)
	}
	var p0, p1, c []string
	for _, e := range evs {
		if e.kind != "deliver" {
			continue
		}
		switch e.shard {
		case shard0:
			p0 = append(p0, e.data)
		case shard1:
			p1 = append(p1, e.data)
		default:
			c = append(c, e.data)
		}
	}
	if diff := cmp.Diff([]string{"p0-a", "p0-b", "p0-c"}, p0); diff != "" {
		t.Errorf("parent 0 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"p1-a", "p1-b", "p1-c"}, p1); diff != "" {
		t.Errorf("parent 1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"child-1", "child-2"}, c); diff != "" {
		t.Errorf("child (-want +got):\n%s", diff)
	}
}

// Pausing or closing during initialisation cancels the batch and publishes
// nothing; Resume initialises again.
func TestPauseAndCloseDuringInitPublishNothing(t *testing.T) {
	for _, how := range []string{"pause", "close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			s := newFakeStream(t, 2)
			s.put(shard0, "h")
			store := memStore(t, journal.NewMemory())
			entered := make(chan struct{}, 4)
			remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard1, Block: make(chan struct{}), Entered: entered})
			rec := newRecorder()
			ih := newInitHook()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := start(t, ctx, Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store), WithHooks(ih))
			<-entered
			switch how {
			case "pause":
				r.l.Pause()
			case "close":
				closeCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
				defer c()
				if err := r.l.Close(closeCtx); err != nil {
					t.Fatalf("Close: %v", err)
				}
			case "cancel":
				cancel()
			}
			// Shard 0's scan may have succeeded; nothing may be published.
			deadline := time.Now().Add(300 * time.Millisecond)
			for time.Now().Before(deadline) {
				if p, _ := store.Load(context.Background(), s.name); len(p) != 0 {
					t.Fatalf("published after %s during init: %v", how, p)
				}
				time.Sleep(10 * time.Millisecond)
			}
			switch how {
			case "pause":
				remove()
				r.l.Resume()
				if e := ih.wait(t); e.Resolved != 2 {
					t.Errorf("after Resume resolved %d shards, want 2", e.Resolved)
				}
				p, _ := store.Load(context.Background(), s.name)
				if len(p) != 2 {
					t.Errorf("after Resume: progress %v, want both shards", p)
				}
			case "close":
				if err := r.wait(t); !errors.Is(err, ErrClosed) {
					t.Errorf("Run = %v, want ErrClosed", err)
				}
			case "cancel":
				if err := r.wait(t); !errors.Is(err, context.Canceled) {
					t.Errorf("Run = %v, want context.Canceled", err)
				}
			}
		})
	}
}

// An explicit selection reads only the selected shards, from their own
// start positions; shrinking it later leaves the old entries stale: no
// scan and no loop for them.
func TestExplicitSelectionAndStaleEntries(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "s0-old")
	s.put(shard1, "s1-old")
	s.settle()
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec,
		Shards: map[string]scan.Position{shard0: scan.TrimHorizon(), shard1: scan.Latest()}},
		WithClient(s.f), WithStore(store))
	rec.waitFor(t, "s0-old")
	s.put(shard1, "s1-new")
	rec.waitFor(t, "s1-new")
	r.stop(t)
	if slices.Contains(rec.delivered(), "s1-old") {
		t.Errorf("shard 1 started at LATEST but its history was delivered: %q", rec.delivered())
	}

	// Shrink the selection to shard 0: shard 1's entry is stale.
	s.put(shard1, "s1-ignored")
	s.put(shard0, "s0-new")
	rec2 := newRecorder()
	ih := newInitHook()
	itersBefore := s.f.Calls(kinesistest.OpGetShardIterator)
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: rec2, Shards: map[string]scan.Position{shard0: {}}},
		WithClient(s.f), WithStore(store), WithHooks(ih))
	if e := ih.wait(t); e.Resolved != 0 {
		t.Errorf("stale entry caused %d scans", e.Resolved)
	}
	rec2.waitFor(t, "s0-new")
	r2.stop(t)
	if diff := cmp.Diff([]string{"s0-new"}, rec2.delivered()); diff != "" {
		t.Errorf("after shrinking (-want +got):\n%s", diff)
	}
	// Only shard 0's loop asked for an iterator.
	if got := s.f.Calls(kinesistest.OpGetShardIterator) - itersBefore; got != 1 {
		t.Errorf("%d GetShardIterator calls after shrinking, want 1 (shard 0's loop only)", got)
	}
}

// A tracked shard that vanishes from ListShards before it was completed
// stops the Loader with a lineage error naming it, in its message and in
// the RunError's Shard (which was empty: found by a review).
func TestVanishedShardIsALineageError(t *testing.T) {
	s := newFakeStream(t, 1)
	store := memStore(t, journal.NewMemory())
	ghost := "shardId-000000000099"
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: ghost, State: StateActive, Position: scan.AfterSequence("42")}}); err != nil {
		t.Fatal(err)
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f), WithStore(store))
	err := r.wait(t)
	if !errors.Is(err, ErrLineage) || !strings.Contains(err.Error(), ghost) {
		t.Fatalf("Run = %v, want ErrLineage naming %s", err, ghost)
	}
	checkStop(t, err, s.name, ghost, "Lineage", ErrLineage)
}

// A Sink that keeps refusing a batch stops the Loader after the retries,
// with the shard named, and nothing after the last accepted batch is
// committed.
func TestSinkErrorsStopTheLoaderAndCommitNothingAfter(t *testing.T) {
	s := newFakeStream(t, 1)
	for _, d := range []string{"a", "b", "c"} {
		s.put(shard0, d)
	}
	store := memStore(t, journal.NewMemory())
	attempts := 0
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		if string(b.Records[0].Data) == "b" {
			attempts++
			return errBoom
		}
		return nil
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 1, SinkRetries: 3},
		WithClient(s.f), WithStore(store))
	err := r.wait(t)
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), shard0) {
		t.Fatalf("Run = %v, want the sink's error naming %s", err, shard0)
	}
	if attempts != 4 {
		t.Errorf("the sink was called %d times for the refused batch, want 4 (1 + 3 retries)", attempts)
	}
	if diff := cmp.Diff([]string{"a"}, rec.delivered()); diff != "" {
		t.Errorf("accepted (-want +got):\n%s", diff)
	}
	p, _ := store.Load(context.Background(), s.name)
	first := rec.events()[0].cp
	if !p[shard0].Position.Equal(first) {
		t.Errorf("committed %v, want the checkpoint of the last accepted batch %v", p[shard0].Position, first)
	}
}

// In topology.go, observe: the lineage check skips `n.State == 0`:
// with a TransactionalSink and no journal (the supported "journal lost"
// case), a shard known only by the Sink's checkpoint (not SHARD_END) that
// has expired from ListShards raises no lineage error; worse, its node
// keeps State 0, so ready() holds its children back forever: the Loader
// runs, reads nothing and reports nothing.
func TestExpiredShardKnownOnlyBySinkIsALineageError(t *testing.T) {
	clock := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(clock), kinesistest.WithRetention(time.Hour))
	a := s.put(shard0, "a")
	s.put(shard0, "b") // never delivered: expires unread
	s.split(shard0)
	clock.Advance(2 * time.Hour) // shard 0 and its records expire
	children := s.openShards()
	for _, c := range children {
		s.put(c, "child-"+c)
	}
	tx := &txSink{recorder: *newRecorder(), cps: map[string]scan.Position{shard0: scan.AfterSequence(a)}}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: tx}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.Is(err, ErrLineage) || !strings.Contains(err.Error(), shard0) {
			t.Fatalf("Run = %v, want ErrLineage naming %s", err, shard0)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Run still running after 3 s with no lineage error; delivered %q (children %v never read)", tx.delivered(), children)
	}
}

// A COMPLETED parent that retention removed from ListShards is no lineage
// error, and its child is read from TRIM_HORIZON.
func TestExpiredCompletedParentReleasesChild(t *testing.T) {
	clock := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(clock), kinesistest.WithRetention(time.Hour))
	s.put(shard0, "p")
	s.split(shard0)
	clock.Advance(2 * time.Hour)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "c-"+c)
	}
	store := memStore(t, journal.NewMemory())
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateCompleted, Position: scan.ShardEnd()}}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store))
	rec.waitFor(t, "c-"+children[0], "c-"+children[1])
	r.stop(t)
	if len(rec.delivered()) != 2 {
		t.Errorf("delivered %q, want only the children's records", rec.delivered())
	}
}

// holdBatches makes rec hold every batch of shard with records until
// release is closed; held receives once the first one is held.
func holdBatches(rec *recorder, shard string) (held <-chan struct{}, release chan struct{}) {
	h, release := make(chan struct{}, 1), make(chan struct{})
	rec.fail = func(b Batch) error {
		if b.ShardID == shard && len(b.Records) > 0 {
			select {
			case h <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}
	return h, release
}

// A child starts as soon as its parent completes, even while a periodic
// ListShards is held up (slow, throttled, retried): the schedule's loop
// lists shards off the loop, and goes on finishing shards and starting
// their children meanwhile. It listed them in line, and a completed
// shard's children waited for the listing: 3 to 7 s in the fan-out kill
// loop, where ListShards met injected faults.
func TestAChildStartsWhileAListingIsHeldUp(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "parent-1")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "child-of-"+c)
	}

	rec := newRecorder()
	parentHeld, releaseParent := holdBatches(rec, shard0)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 20 * time.Millisecond},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(rec))
	<-parentHeld

	// Every ListShards from now on is held until the end of the test.
	listing, unblock := make(chan struct{}, 100), make(chan struct{})
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Entered: listing, Block: unblock})
	var once sync.Once
	release := func() { once.Do(func() { remove(); close(unblock) }) }
	defer release()
	select {
	case <-listing: // a periodic listing is in flight, and held
	case <-time.After(10 * time.Second):
		t.Fatal("no ListShards within 10 s of the parent's first batch")
	}

	close(releaseParent)
	var want []string
	for _, c := range children {
		want = append(want, "child-of-"+c)
	}
	rec.waitFor(t, append([]string{"parent-1"}, want...)...) // while ListShards is held
	release()
	r.stop(t)
}

// staleLister is the fake, whose ListShards, once armed, holds its answer
// (got before the hold) until released: a listing that returns after the
// stream changed.
type staleLister struct {
	*kinesistest.Fake
	armed   atomic.Bool
	got     chan struct{} // receives once the held answer was got
	release chan struct{}
}

func (c *staleLister) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	out, err := c.Fake.ListShards(ctx, in, opts...)
	if err == nil && c.armed.CompareAndSwap(true, false) {
		c.got <- struct{}{}
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, err
}

// A listing that began before a shard split and returns after the
// Loader read the shard to its end and completed it lists the shard open:
// applied, it would take the COMPLETED shard for progress of another
// stream and stop Run with a lineage error. The Loader drops a listing
// that lists open a shard completed since the listing began, and lists
// again: the children are found and read.
func TestAListingOlderThanACompletionIsListedAgain(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "parent-1")
	client := &staleLister{Fake: s.f, got: make(chan struct{}, 1), release: make(chan struct{})}
	rec := newRecorder()
	parentHeld, releaseParent := holdBatches(rec, shard0)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 20 * time.Millisecond},
		WithClient(client), WithStore(memStore(t, journal.NewMemory())), WithHooks(rec))
	<-parentHeld
	client.armed.Store(true)
	select {
	case <-client.got: // a listing holds an answer with the parent open
	case <-time.After(10 * time.Second):
		t.Fatal("no ListShards within 10 s of the parent's first batch")
	}
	s.split(shard0)
	children := s.openShards()
	var want []string
	for _, c := range children {
		want = append(want, "child-of-"+c)
		s.put(c, "child-of-"+c)
	}
	close(releaseParent)
	waitUntil(t, "the parent completed", func() bool {
		for _, e := range rec.events() {
			if e.kind == "state" && e.shard == shard0 && e.state == StateCompleted {
				return true
			}
		}
		return false
	})
	close(client.release) // the stale answer returns
	rec.waitFor(t, want...)
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}

// slowLister is the fake, whose ListShards takes a while and is counted.
type slowLister struct {
	*kinesistest.Fake
	delay time.Duration
	calls atomic.Int32
}

func (c *slowLister) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	c.calls.Add(1)
	select {
	case <-time.After(c.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.Fake.ListShards(ctx, in, opts...)
}

// A shard split while it is read: the reader's hint asks for a listing
// with the parent still ACTIVE, and the parent completes while the slow
// listing is in flight. That listing, made after the split, lists the
// parent closed and its children: it is applied, and the children start,
// with one ListShards (taking every change during a listing for
// staleness made it two, and each a slow one).
func TestASplitDuringARunIsListedOnce(t *testing.T) {
	s := newFakeStream(t, 1)
	client := &slowLister{Fake: s.f, delay: 300 * time.Millisecond}
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: time.Hour},
		WithClient(client), WithStore(memStore(t, journal.NewMemory())), WithHooks(rec, ih))
	ih.wait(t)
	s.put(shard0, "parent-1")
	rec.waitFor(t, "parent-1")

	before := client.calls.Load()
	s.split(shard0)
	var want []string
	for _, c := range s.openShards() {
		want = append(want, "child-of-"+c)
		s.put(c, "child-of-"+c)
	}
	rec.waitFor(t, want...)
	if n := client.calls.Load() - before; n != 1 {
		t.Errorf("%d ListShards between the split and the children's records, want 1", n)
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}
