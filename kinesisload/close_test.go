package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// Close lets the in-flight batch finish and commit before it returns.
func TestCloseFinishesInFlightBatch(t *testing.T) {
	s := newFakeStream(t, 1)
	seq := s.put(shard0, "only")
	store := memStore(t, journal.NewMemory())
	entered, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		close(entered)
		<-release
		return nil
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()}, WithClient(s.f), WithStore(store))
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- r.l.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a batch was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := r.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	p, _ := store.Load(context.Background(), s.name)
	if got := p[shard0].Position; !got.Equal(scan.AfterSequence(seq)) {
		t.Errorf("after Close the shard is at %v, want the in-flight batch committed (%v)", got, scan.AfterSequence(seq))
	}
	if err := r.l.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// When Close's context ends first, the in-flight delivery is cancelled,
// nothing is committed for it, and Close returns the context's error.
func TestCloseTimeoutCancelsDelivery(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "only")
	store := memStore(t, journal.NewMemory())
	entered := make(chan struct{})
	sinkErr := make(chan error, 1)
	sink := SinkFunc(func(ctx context.Context, b Batch) error {
		close(entered)
		<-ctx.Done()
		sinkErr <- ctx.Err()
		return ctx.Err()
	})
	r := start(t, context.Background(), Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon()}, WithClient(s.f), WithStore(store))
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
	}
	if err := <-sinkErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the Sink's context ended with %v, want context.Canceled", err)
	}
	r.wait(t)
	p, _ := store.Load(context.Background(), s.name)
	if got := p[shard0].Position; got.Kind != scan.KindTrimHorizon {
		t.Errorf("after a hard stop the shard is at %v, want its start (nothing committed)", got)
	}
}

// Pause stops reading after the in-flight batch; Resume goes on from the
// committed position without resolving anything again.
func TestPauseResumeDuringConsumption(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history")
	s.settle()
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
	ih.wait(t)
	s.put(shard0, "a")
	rec.waitFor(t, "a")
	r.l.Pause()
	time.Sleep(200 * time.Millisecond) // the loop stops
	calls := s.f.Calls("GetRecords")
	s.put(shard0, "b")
	time.Sleep(300 * time.Millisecond)
	if got := s.f.Calls("GetRecords"); got != calls {
		t.Errorf("%d GetRecords calls while paused", got-calls)
	}
	if got := rec.delivered(); len(got) != 1 {
		t.Errorf("delivered while paused: %q", got)
	}
	r.l.Resume()
	if e := ih.wait(t); e.Resolved != 0 {
		t.Errorf("Resume resolved %d shards again", e.Resolved)
	}
	rec.waitFor(t, "b")
	r.stop(t)
	if diff := cmp.Diff([]string{"a", "b"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
