package kinesisload

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// A closed shard listed at the first start expires by retention before its
// LATEST is resolved: every record of it arrived long before T0, so there
// is nothing of it to deliver, and a restart (which no longer lists it)
// starts fine. The start-up must not stop Run for good with the
// ResourceNotFoundException of its GetShardIterator.
func TestAClosedShardExpiringDuringResolutionDoesNotStopRun(t *testing.T) {
	clock := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(clock), kinesistest.WithRetention(time.Hour))
	s.put(shard0, "old")
	s.split(shard0)
	children := s.openShards()
	clock.Advance(time.Hour - 2*time.Second)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Shard: shard0, Nth: 1, Entered: entered, Block: release})
	rec, ih := newRecorder(), newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(ih))
	awaitEntered(t, entered, r, "the resolution of the closed shard")
	clock.Advance(5 * time.Second) // shard 0 expires
	close(release)
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("Run stopped: %v", err)
	case <-ih.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("initialisation did not finish")
	}
	for _, c := range children {
		s.put(c, "new-"+c)
	}
	rec.waitFor(t, "new-"+children[0], "new-"+children[1])
}
