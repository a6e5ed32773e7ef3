package kinesisload

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// putDuring puts n records named prefix-1..n on shard and returns their
// names.
func (s *stream) putDuring(shard, prefix string, n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		d := fmt.Sprintf("%s-%d", prefix, i)
		s.put(shard, d)
		out = append(out, d)
	}
	return out
}

// awaitEntered waits until a fault's call is in flight.
func awaitEntered(t *testing.T, entered <-chan struct{}, r *running, what string) {
	t.Helper()
	select {
	case <-entered:
	case err := <-r.done:
		t.Fatalf("Run returned before %s: %v", what, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// notDelivered fails the test for every name in unwanted that rec got.
func notDelivered(t *testing.T, rec *recorder, unwanted ...string) {
	t.Helper()
	for _, d := range rec.delivered() {
		if slices.Contains(unwanted, d) {
			t.Errorf("%s arrived before T0 and was delivered", d)
		}
	}
}

// A first start whose ListShards is slow while the shard splits: the
// listing shows the shard CLOSED. Its records that arrived after T0 (before
// the split) are delivered, then its children's. (Before the fix a closed
// shard with a LATEST start became SHARD_END without being read: 0 of 20.)
func TestLatestReadsAShardThatClosedDuringTheFirstStart(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	entered, block := make(chan struct{}, 1), make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: 1, Entered: entered, Block: block})
	rec, ih := newRecorder(), newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(ih, rec))
	awaitEntered(t, entered, r, "the first ListShards")
	want := s.putDuring(shard0, "during", 20)
	s.split(shard0)
	close(block)
	ih.wait(t)
	for i, child := range s.openShards() {
		want = append(want, fmt.Sprintf("child-%d", i))
		s.put(child, want[len(want)-1])
	}
	rec.waitFor(t, want...)
	notDelivered(t, rec, "history")
}

// A first start stopped while it resolves (T0 is journaled), the shard
// splits, and the restart resolves at the journaled T0: the listing shows
// the shard CLOSED, and its records after T0 are delivered before its
// children's. (Before the fix: 0 of 20.)
func TestLatestRestartReadsAShardThatClosedAfterT0(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	j := journal.NewMemory()
	entered := make(chan struct{}, 1)
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: 1, Entered: entered, Block: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	first := start(t, ctx, Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)))
	awaitEntered(t, entered, first, "the LATEST resolution")
	want := s.putDuring(shard0, "during", 20)
	s.split(shard0)
	cancel()
	first.wait(t)
	remove()

	rec, ih := newRecorder(), newInitHook()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)), WithHooks(ih, rec))
	ih.wait(t)
	for i, child := range s.openShards() {
		want = append(want, fmt.Sprintf("child-%d", i))
		s.put(child, want[len(want)-1])
	}
	rec.waitFor(t, want...)
	notDelivered(t, rec, "history")
	// In shard order: the parent's records before its children's.
	got := rec.delivered()
	last := slices.Index(got, "during-20")
	for i := range 2 {
		if c := slices.Index(got, fmt.Sprintf("child-%d", i)); c < last {
			t.Errorf("child-%d delivered at %d, before the parent's last record at %d", i, c, last)
		}
	}
}

// A shard that closed long before T0 (all its records before it) is
// completed without being read, and its children are resolved at T0 too:
// neither the parent's records nor the children's before T0 are delivered.
func TestLatestCompletesAShardThatClosedBeforeT0WithoutReadingIt(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.split(shard0)
	children := s.openShards()
	for _, c := range children {
		s.put(c, "old-"+c)
	}
	s.settle()
	rec, ih := newRecorder(), newInitHook()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(ih, rec))
	ev := ih.wait(t)
	if got := ev.Positions[shard0]; got.Kind != 0 {
		t.Errorf("the closed parent is to be read from %v; want it completed", got)
	}
	var want []string
	for _, c := range children {
		want = append(want, "new-"+c)
		s.put(c, "new-"+c)
	}
	rec.waitFor(t, want...)
	notDelivered(t, rec, "history", "old-"+children[0], "old-"+children[1])
}

// A shard with records after T0 splits during the start-up, and one of its
// children splits at once, empty: the empty child holds no record at or
// after T0, but it must not be completed before its parent is, or its own
// children would be read before the grandparent's records (found by the
// simulation: a later host then stopped with ParentAfterChildError). It
// waits for its parent like any child; the grandchild's records come after
// the grandparent's.
func TestLatestEmptyChildWaitsForItsParentWithRecordsAfterT0(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	entered, block := make(chan struct{}, 1), make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: 1, Entered: entered, Block: block})
	store := memStore(t, journal.NewMemory())
	rec, ih := newRecorder(), newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(store), WithResolver(fastResolver(t)), WithHooks(ih, rec))
	awaitEntered(t, entered, r, "the first ListShards")
	want := s.putDuring(shard0, "during", 5)
	s.split(shard0) // shard1, shard2
	s.split(shard1) // shard3, shard4: shard1 is empty
	close(block)
	ih.wait(t)
	stored, err := store.Load(context.Background(), s.name)
	if err != nil {
		t.Fatal(err)
	}
	if p := stored[shard1]; p.State == StateCompleted && stored[shard0].State != StateCompleted {
		t.Fatalf("the start-up completed %s (%v) while its parent %s is %v", shard1, p, shard0, stored[shard0])
	}
	s.put("shardId-000000000003", "grandchild")
	want = append(want, "grandchild")
	rec.waitFor(t, want...)
	got := rec.delivered()
	if i, j := slices.Index(got, "grandchild"), slices.Index(got, "during-5"); i < j {
		t.Fatalf("the grandchild's record was delivered before the grandparent's: %q", got)
	}
}
