package kinesisload

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// markedStore is a JournalStore whose journal was repaired with mark.
type markedStore struct {
	*JournalStore
	mark *journal.RepairMark
}

func (m markedStore) repairMark() *journal.RepairMark { return m.mark }

// A first start-up journals T0 and dies before its batch; the journal,
// shared with another stream that went on writing for ten minutes, is
// later damaged after the pending T0 and repaired. The pending T0
// survived: resolving at it gives exactly the lost decision. The repair
// path ignores it and starts every shard at AT_TIMESTAMP(last surviving
// write - RepairRewind), five minutes after T0: the records that arrived
// in between are skipped.
func TestARepairStartsNoLaterThanASurvivingT0(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	j := journal.NewMemory()
	entered := make(chan struct{}, 1)
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: 1, Entered: entered, Block: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	first := start(t, ctx, Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)))
	awaitEntered(t, entered, first, "the first ListShards")
	want := s.putDuring(shard0, "during", 5)
	cancel()
	first.wait(t)
	remove()

	store := memStore(t, j)
	t0, pending, err := store.LoadStart(context.Background(), s.name)
	if err != nil || !pending {
		t.Fatalf("setup: no pending T0 (%v, %v)", pending, err)
	}
	// Another stream in the same journal wrote ten minutes later; that
	// write survived the repair.
	s.clock.off.Add(int64(10 * time.Minute))
	mark := &journal.RepairMark{LastIndex: 7, LastWrite: s.clock.Now(), Time: s.clock.Now()}
	t.Logf("pending T0 %v, last surviving write %v", t0, mark.LastWrite)

	rec := newRecorder()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(markedStore{JournalStore: store, mark: mark}), WithResolver(fastResolver(t)), WithHooks(rec))
	s.put(shard0, "after")
	rec.waitFor(t, append(want, "after")...)
}
