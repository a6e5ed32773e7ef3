package kinesisload

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// A first Run stopped hard after Kinesis's first answer, before it lists
// the shards: T0 (the moment the Run began) was its first durable write, so
// the next Run resolves at it and delivers what arrived in between. (Before
// the fix T0 was journaled only after two ListShards, and the restart took
// a T0 of its own, after those records.)
func TestLatestFirstRunStoppedBeforeListingKeepsItsT0(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "history")
	s.settle()
	j := journal.NewMemory()
	entered := make(chan struct{}, 1)
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: 1, Entered: entered, Block: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	first := start(t, ctx, Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)))
	awaitEntered(t, entered, first, "the first ListShards")
	want := append(s.putDuring(shard0, "during-0", 5), s.putDuring(shard1, "during-1", 5)...)
	cancel()
	first.wait(t)
	remove()
	s.settle() // a T0 taken now would be after the records above

	rec := newRecorder()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)), WithHooks(rec))
	rec.waitFor(t, want...)
	notDelivered(t, rec, "history")
}
