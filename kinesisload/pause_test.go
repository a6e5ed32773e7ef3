package kinesisload

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
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

// In session.go, schedule, `case d.completed && !stopping()`: a
// Pause (or Close) that lands while the scheduler saves the activation of
// a completed parent's children makes the save fail with context.Canceled;
// the scheduler takes that for a fatal error and Run returns
// "saving progress: context canceled" instead of pausing (or ErrClosed).
func TestPauseRacingCompletionIsNotAnError(t *testing.T) {
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

// A Pause that lands while a parent's end page is in the Sink: the batch
// finishes and COMPLETED is made durable, but the scheduler, stopping,
// does not apply it. Nothing of the children is read while paused; after
// Resume the children are activated from the durable completion and read,
// and the parent is not read again.
func TestPauseDuringEndPageThenResume(t *testing.T) {
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
