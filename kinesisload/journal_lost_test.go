package kinesisload

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/journal"
)

// A TransactionalSink holds the truth without the journal: a lost journal
// must never make the Loader resolve LATEST again. A child born during Run
// 1 (after its initialisation stored the starts in the Sink) has no row in
// the Sink until its first record is delivered. Run 1 stops; a record
// lands in that child; the journal is lost. Run 2 must read the child from
// TRIM_HORIZON (a shard born after the first start), not resolve it at a
// fresh LATEST: keepStart journals a new T0 in Run 2's establishIdentity,
// and continueFirstRun takes that T0 for one left pending by an earlier
// first start-up, so Run 2 is taken for a first run.
func TestALostJournalDoesNotResolveLatestForAChildWithoutASinkRow(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	tx := &txSink{recorder: *newRecorder()}
	ih := newInitHook()
	r1 := start(t, context.Background(), Config{Stream: s.name, Sink: tx}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(ih))
	ih.wait(t)
	s.put(shard0, "p-1")
	s.split(shard0) // shard1, shard2
	s.put(shard1, "c1-1")
	tx.waitFor(t, "p-1", "c1-1")
	r1.stop(t)
	cps, _ := tx.Checkpoints(context.Background(), s.name)
	if _, ok := cps[shard2]; ok {
		t.Fatalf("setup: the sink holds a row for %s: %v", shard2, cps)
	}
	s.put(shard2, "c2-1") // after Run 1, before Run 2: after every start
	s.settle()

	// The journal is lost; the Sink is whole.
	ih2 := newInitHook()
	start(t, context.Background(), Config{Stream: s.name, Sink: tx}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(ih2))
	ev := ih2.wait(t)
	if ev.Resolved > 0 {
		t.Errorf("run 2 resolved %d LATEST positions after the journal was lost: %v", ev.Resolved, ev.Positions)
	}
	tx.waitFor(t, "c2-1")
}
