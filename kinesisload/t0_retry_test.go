package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// plainStore is a PositionStore and nothing more: not a StartStore.
type plainStore struct{ PositionStore }

// TestRetriedStartupKeepsT0WithoutStartStore: with a store that cannot
// journal T0, a start-up that fails transiently and is started over inside
// the same Run still resolves at the first attempt's T0, so records that
// arrived between the attempts are delivered.
func TestRetriedStartupKeepsT0WithoutStartStore(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "history-0")
	s.put(shard1, "history-1")
	s.settle()
	removeGet := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: errInternal})
	rec, hk, ih := newRecorder(), &retryLog{}, newInitHook()
	// The start-up is started over after 0.5-1 s: the records below are
	// put meanwhile.
	cfg := Config{Stream: s.name, Sink: rec, KinesisBackoff: time.Second, KinesisMaxBackoff: time.Second}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(plainStore{memStore(t, journal.NewMemory())}),
		WithResolver(fastResolver(t)), WithHooks(ih, hk, rec))
	hk.waitAttempts(t, r, "Initialise", "", 1)
	s.put(shard0, "between-0")
	s.put(shard1, "between-1")
	s.settle()
	removeGet()
	ih.wait(t)
	s.put(shard0, "after-0")
	rec.waitFor(t, "between-0", "between-1", "after-0")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
	for _, d := range rec.delivered() {
		if d == "history-0" || d == "history-1" {
			t.Errorf("%s from before the first T0 was delivered", d)
		}
	}
}
