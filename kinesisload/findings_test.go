package kinesisload

// Regression tests for six bugs a review of the Loader found; each failed
// before its fix. "Finding N" names where the bug was.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// holdActivation blocks the first Save that activates a shard other than
// parent (the scheduler's save after a parent completed) until released.
type holdActivation struct {
	PositionStore
	parent  string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *holdActivation) Save(ctx context.Context, stream string, u []ShardProgress) error {
	hold := false
	for _, p := range u {
		if p.State == StateActive && p.ShardID != h.parent {
			h.once.Do(func() { hold = true })
		}
	}
	if hold {
		close(h.entered)
		<-h.release
	}
	return h.PositionStore.Save(ctx, stream, u)
}

// Finding 1 (session.go, schedule, `case d.completed && !stopping()`): a
// Pause (or Close) that lands while the scheduler saves the activation of
// a completed parent's children makes the save fail with context.Canceled;
// the scheduler takes that for a fatal error and Run returns
// "saving progress: context canceled" instead of pausing (or ErrClosed).
func TestReviewPauseRacingCompletionIsNotAnError(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "p")
	s.split(shard0)
	h := &holdActivation{PositionStore: memStore(t, journal.NewMemory()), parent: shard0,
		entered: make(chan struct{}), release: make(chan struct{})}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()},
		WithClient(s.f), WithStore(h))
	select {
	case <-h.entered: // the parent is COMPLETED; its children are being activated
	case <-time.After(10 * time.Second):
		t.Fatal("the parent never completed")
	}
	r.l.Pause() // the graceful stop lands during the activation save
	close(h.release)
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("Run returned %v after a Pause; a Pause must not end Run", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
}

// Finding 2 (topology.go, observe: the lineage check skips `n.State == 0`):
// with a TransactionalSink and no journal (the supported "journal lost"
// case), a shard known only by the Sink's checkpoint (not SHARD_END) that
// has expired from ListShards raises no lineage error; worse, its node
// keeps State 0, so ready() holds its children back forever: the Loader
// runs, reads nothing and reports nothing.
func TestReviewExpiredShardKnownOnlyBySinkIsALineageError(t *testing.T) {
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

// Finding 3 (session.go, initialise: resolved positions are copied only
// into `updates`, which holds the fresh shards): a tracked shard whose
// stored position is LATEST (it is not fresh) is resolved, read from the
// resolved tip, but the resolved position is never journaled. A restart
// before its first commit resolves LATEST again and skips what arrived in
// between: the very bug tidemark exists to fix. A stored LATEST is
// reachable: observe saves the Config.Shards position (LATEST, or zero
// meaning StartPosition) of a selected shard first listed after
// initialisation without resolving it.
func TestReviewStoredLatestIsJournaledOnceResolved(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "old")
	store := memStore(t, journal.NewMemory())
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.Latest()}}); err != nil {
		t.Fatal(err)
	}
	ih := newInitHook()
	first := newRecorder()
	first.fail = func(Batch) error { return errBoom } // aborts before any commit
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	r1 := start(t, ctx, Config{Stream: s.name, Sink: first, SinkRetries: 1000}, WithClient(s.f), WithStore(store), WithHooks(ih))
	if e := ih.wait(t); e.Resolved != 1 {
		t.Fatalf("resolved %d shards, want 1", e.Resolved)
	}
	p, _ := store.Load(context.Background(), s.name)
	if p[shard0].Position.Kind == scan.KindLatest {
		t.Errorf("after initialisation shard 0 is still journaled at LATEST; the resolved position was not saved")
	}
	s.put(shard0, "R4")
	abort()
	r1.wait(t)

	second := newRecorder()
	ih2 := newInitHook()
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: second}, WithClient(s.f), WithStore(store), WithHooks(ih2))
	ih2.wait(t)
	s.put(shard0, "R5")
	deadline := time.After(3 * time.Second)
	for !slices.Contains(second.delivered(), "R5") {
		select {
		case <-deadline:
			t.Fatalf("R5 not delivered; got %q", second.delivered())
		case <-time.After(10 * time.Millisecond):
		}
	}
	r2.stop(t)
	if !slices.Contains(second.delivered(), "R4") {
		t.Errorf("R4 (after the first resolved tip, before the restart) was lost: delivered %q", second.delivered())
	}
}

// Finding 4 (store.go, JournalStore.Save): Journal.Append may fail after
// the record was handed to the disk (the file journal returns ctx.Err()
// while waiting for its group fsync, with an index already taken). Save
// then never marks that index applied, so `done` stops below it for good:
// no snapshot is ever taken again (the journal grows without bound and
// `applied` grows by one entry per Save), and the in-memory state lacks a
// durable record.
func TestReviewJournalStoreKeepsSnapshottingAfterAnUnknownAppend(t *testing.T) {
	j := &unknownAppendJournal{Journal: journal.NewMemory()}
	store, err := NewJournalStore(context.Background(), j, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	save := func(seq string) error {
		return store.Save(ctx, "orders", []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.AfterSequence(seq)}})
	}
	if err := save("1"); err != nil {
		t.Fatal(err)
	}
	j.failNext.Store(true) // durable, but the caller hears "context canceled"
	if err := save("2"); err == nil {
		t.Fatal("the unknown append did not fail")
	}
	for i := 3; i <= 20; i++ {
		if err := save(strconv.Itoa(i * 10)); err != nil {
			t.Fatal(err)
		}
	}
	if n := j.snapshots.Load(); n == 0 {
		t.Errorf("no snapshot in 19 saves with SnapshotEvery = 2 after one append of unknown outcome: `done` is stuck (%d indexes waiting in applied)", len(store.applied))
	}
}

type unknownAppendJournal struct {
	journal.Journal
	failNext  atomic.Bool
	snapshots atomic.Int64
}

func (j *unknownAppendJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	idx, err := j.Journal.Append(ctx, recs...)
	if err == nil && j.failNext.CompareAndSwap(true, false) {
		return 0, context.Canceled
	}
	return idx, err
}

func (j *unknownAppendJournal) Snapshot(ctx context.Context, index uint64, state []byte) error {
	err := j.Journal.Snapshot(ctx, index, state)
	if err == nil {
		j.snapshots.Add(1)
	}
	return err
}

// Finding 5 (topology.go, startOf after initialisation): a shard named in
// Config.Shards but first listed after initialisation (a child born of a
// split) started at LATEST and stopped its loop. Such a selection is now
// refused at initialisation (TestRunRefusesUnknownSelectedShard), and a
// shard first seen after it starts at TRIM_HORIZON whatever the selection
// says (startOf), as the split tests check.

// Finding 6 (topology.go, observe with t.initial: startOf gives every
// fresh shard StartPosition, and unresolved() resolves a waiting child's
// LATEST at initialisation): with Shards {A: TRIM_HORIZON} and A already
// split, A is read from its start to its end, but its children start at
// the tip they had at initialisation, so what they received between the
// split and the start is skipped although they "are followed". DESIGN.md
// says a child "starts at TRIM_HORIZON, never LATEST"; its Resolution
// section also lists "children still waiting for parents when the initial
// snapshot is taken" in the unresolved set, so the two lines conflict.
func TestReviewFollowedChildOfSelectedParentStartsAtTrimHorizon(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "p")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "early-"+c)
	}
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, Shards: map[string]scan.Position{shard0: scan.TrimHorizon()}},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
	ih.wait(t)
	for _, c := range children {
		s.put(c, "late-"+c)
	}
	rec.waitFor(t, "p", "late-"+children[0], "late-"+children[1])
	r.stop(t)
	for _, c := range children {
		if !slices.Contains(rec.delivered(), "early-"+c) {
			t.Errorf("child %s of the selected parent: its record from before the start was skipped; delivered %q", c, rec.delivered())
		}
	}
}
