package kinesisload

// Regression tests from the review of the core: paths that are correct
// today and that no other test covers.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// A Pause that lands while a parent's end page is in the Sink: the batch
// finishes and COMPLETED is made durable, but the scheduler, stopping,
// does not apply it. Nothing of the children is read while paused; after
// Resume the children are activated from the durable completion and read,
// and the parent is not read again.
func TestReviewPauseDuringEndPageThenResume(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "p")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "c-"+c)
	}
	store := memStore(t, journal.NewMemory())
	entered, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		if b.ShardID == shard0 && b.Checkpoint.Kind == scan.KindShardEnd {
			close(entered)
			<-release
		}
		return nil
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()},
		WithClient(s.f), WithStore(store), WithHooks(rec))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the end page never reached the Sink")
	}
	r.l.Pause()
	close(release)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p, _ := store.Load(context.Background(), s.name); p[shard0].State == StateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the in-flight end page was not committed on Pause")
		}
	}
	time.Sleep(200 * time.Millisecond) // a child loop would run here if one had started
	if got := rec.delivered(); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("delivered while paused: %q", got)
	}
	r.l.Resume()
	rec.waitFor(t, "c-"+children[0], "c-"+children[1])
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	got := rec.delivered()
	if got[0] != "p" || len(got) != 3 {
		t.Errorf("delivered %q: want p once, then each child's record", got)
	}
}

// A COMPLETED parent that retention removed from ListShards is no lineage
// error, and its child is read from TRIM_HORIZON.
func TestReviewExpiredCompletedParentReleasesChild(t *testing.T) {
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

// With an explicit selection, the child of a merge of a selected and an
// unselected shard is followed: it waits for the selected parent only,
// and the unselected parent is never read.
func TestReviewSelectionFollowsMergeWithUnselectedParent(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "p0")
	s.put(shard1, "p1")
	s.merge(shard0, shard1)
	child := s.openShards()[0]
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, Shards: map[string]scan.Position{shard0: scan.TrimHorizon()}},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(rec, ih))
	ih.wait(t)
	s.put(child, "c") // after the start: a record put before it is finding 6 (review_fail_test.go)
	rec.waitFor(t, "p0", "c")
	r.stop(t)
	if diff := cmp.Diff([]string{"p0", "c"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	evs := rec.events()
	completed := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == shard0 && e.state == StateCompleted })
	first := indexOf(evs, func(e event) bool { return e.kind == "deliver" && e.shard == child })
	if completed < 0 || first < completed {
		t.Errorf("child's first record at %d, selected parent completed at %d", first, completed)
	}
}
