package kinesisload

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// widened is the scenario of issue 11 §2: a Loader selected shard 1 only;
// shards 0 and 1 merged; the child was followed and read. A later run that
// tracks shard 0 too would read shard 0, a parent, after its child.
type widened struct {
	s     *stream
	store *JournalStore
	child string
}

func newWidened(t *testing.T) *widened {
	t.Helper()
	s := newFakeStream(t, 2)
	s.put(shard0, "p0")
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, Shards: map[string]scan.Position{shard1: scan.TrimHorizon()}},
		WithClient(s.f), WithStore(store), WithHooks(ih))
	ih.wait(t)
	s.put(shard1, "p1")
	s.merge(shard0, shard1)
	child := s.openShards()[0]
	s.put(child, "c1")
	rec.waitFor(t, "p1", "c1")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("first run: Run = %v, want ErrClosed", err)
	}
	if slices.Contains(rec.delivered(), "p0") {
		t.Fatalf("first run read the unselected shard 0: %q", rec.delivered())
	}
	return &widened{s: s, store: store, child: child}
}

// Widening the selection to a parent whose child was already read is
// refused with a lineage error naming both and the ways out; nothing is
// read and nothing is saved.
func TestWidenedSelectionRefusesParentAfterChild(t *testing.T) {
	w := newWidened(t)
	before, _ := w.store.Load(context.Background(), w.s.name)
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: w.s.name, Sink: rec}, WithClient(w.s.f), WithStore(w.store))
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(5 * time.Second):
		t.Fatalf("Run did not refuse to read shard 0 after its child; delivered %q", rec.delivered())
	}
	var pe *ParentAfterChildError
	if !errors.As(err, &pe) || !errors.Is(err, ErrLineage) {
		t.Fatalf("Run = %v, want a *ParentAfterChildError wrapping ErrLineage", err)
	}
	checkStop(t, err, w.s.name, shard0, "Lineage", ErrLineage)
	if pe.Stream != w.s.name || pe.Parent != shard0 || pe.Child != w.child {
		t.Errorf("error names stream %q parent %q child %q, want %q %q %q", pe.Stream, pe.Parent, pe.Child, w.s.name, shard0, w.child)
	}
	for _, way := range []string{"Shards[" + shard0 + "] = SHARD_END", "OutOfOrderShards"} {
		if !strings.Contains(err.Error(), way) {
			t.Errorf("error %q does not name the way out %q", err, way)
		}
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Errorf("delivered %q, want nothing", got)
	}
	after, _ := w.store.Load(context.Background(), w.s.name)
	if len(after) != len(before) {
		t.Errorf("progress saved by the refused run: before %v, after %v", before, after)
	}
}

// Way out 1: start the parent at SHARD_END. Its records are skipped, it is
// COMPLETED, and the child goes on.
func TestWidenedSelectionParentAtShardEnd(t *testing.T) {
	w := newWidened(t)
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: w.s.name, Sink: rec,
		Shards: map[string]scan.Position{shard0: scan.ShardEnd(), shard1: {}}},
		WithClient(w.s.f), WithStore(w.store), WithHooks(ih))
	ih.wait(t)
	w.s.put(w.child, "c2")
	rec.waitFor(t, "c2")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if got := rec.delivered(); !slices.Equal(got, []string{"c2"}) {
		t.Errorf("delivered %q, want only c2 (p0 skipped, c1 not again)", got)
	}
	p, _ := w.store.Load(context.Background(), w.s.name)
	if got := p[shard0]; got.State != StateCompleted || got.Position.Kind != scan.KindShardEnd {
		t.Errorf("shard 0 = %+v, want COMPLETED at SHARD_END", got)
	}
}

// SHARD_END is refused for an open shard: it would complete a shard that
// Kinesis still writes to.
func TestShardEndRefusedForOpenShard(t *testing.T) {
	s := newFakeStream(t, 2)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder(), Shards: map[string]scan.Position{shard0: scan.ShardEnd()}},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Shards["+shard0+"] = SHARD_END") {
		t.Fatalf("Run = %v, want ErrInvalidConfig naming Shards[%s]", err, shard0)
	}
}

// Way out 2: opt in to out-of-order delivery for the parent by name. Its
// records are delivered (after the child's earlier ones, as asked); the
// child waits for it to complete, so the child's new records follow.
func TestWidenedSelectionOutOfOrderOptIn(t *testing.T) {
	w := newWidened(t)
	w.s.put(w.child, "c2")
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: w.s.name, Sink: rec, OutOfOrderShards: []string{shard0}},
		WithClient(w.s.f), WithStore(w.store), WithHooks(rec))
	rec.waitFor(t, "p0", "c2")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if got := rec.delivered(); !slices.Equal(got, []string{"p0", "c2"}) {
		t.Errorf("delivered %q, want p0 then c2", got)
	}
}

func TestNewRefusesEmptyOutOfOrderShard(t *testing.T) {
	_, err := New(Config{Stream: "orders", Sink: newRecorder(), Dir: t.TempDir(), OutOfOrderShards: []string{""}})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "OutOfOrderShards[0]") {
		t.Fatalf("New = %v, want ErrInvalidConfig naming OutOfOrderShards[0]", err)
	}
}

// A SHARD_END selection of a parent that has since expired (retention:
// Kinesis no longer lists it) is kept at the next start: the check that
// SHARD_END names a closed shard took the unlisted shard for an open one,
// and every later Run stopped with ErrInvalidConfig. Found by a review.
func TestShardEndSelectionOfAParentThatExpiredIsKept(t *testing.T) {
	clock := kinesistest.NewManualClock(time.Now())
	s := newFakeStream(t, 1, kinesistest.WithClock(clock), kinesistest.WithRetention(time.Hour))
	s.put(shard0, "p")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "c1-"+c)
	}
	store := memStore(t, journal.NewMemory())
	cfg := Config{Stream: s.name, StartPosition: scan.TrimHorizon(), Shards: map[string]scan.Position{shard0: scan.ShardEnd()}}
	for run, prefix := range []string{"c1-", "c2-"} {
		if run == 1 {
			clock.Advance(2 * time.Hour) // shard 0 expires: no longer listed
			for _, c := range children {
				s.put(c, prefix+c)
			}
		}
		rec := newRecorder()
		cfg.Sink = rec
		r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(store))
		rec.waitFor(t, prefix+children[0], prefix+children[1])
		if err := r.stop(t); !errors.Is(err, ErrClosed) {
			t.Fatalf("run %d: Run = %v, want ErrClosed", run+1, err)
		}
	}
}
