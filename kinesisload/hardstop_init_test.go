package kinesisload

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// stuckStartSink is a TransactionalSink whose Deliver of a start batch
// ignores its context until released.
type stuckStartSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stuckStartSink) Deliver(ctx context.Context, b Batch) error {
	if len(b.Records) == 0 {
		s.once.Do(func() { close(s.entered) })
		<-s.release // ignores ctx
	}
	return nil
}

func (s *stuckStartSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return map[string]scan.Position{}, nil
}

// Run's promise: after a hard stop it returns within about a second even
// if a Sink ignores its context (a StuckError). A TransactionalSink's
// Deliver of a start batch that ignored its context held Run for ever:
// the grace covered the consume loops only (found by a review).
func TestAHardStopDuringAStartBatchReturns(t *testing.T) {
	s := newFakeStream(t, 1)
	sink := &stuckStartSink{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(sink.release)
	l, err := New(Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon()}, fast, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no start batch delivered")
	}
	cancel() // the hard stop
	select {
	case err := <-done:
		if !errors.Is(err, ErrStuck) || !errors.Is(err, ErrSink) {
			t.Errorf("Run = %v, want a RunError of ErrSink wrapping a StuckError", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5 s after a hard stop while a start batch's Deliver ignores its context")
	}
}

// stuckCheckpointsSink is a TransactionalSink whose Checkpoints ignores
// its context until released.
type stuckCheckpointsSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stuckCheckpointsSink) Deliver(ctx context.Context, b Batch) error { return nil }

func (s *stuckCheckpointsSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release // ignores ctx
	return map[string]scan.Position{}, nil
}

// The same with the Sink's Checkpoints, called during initialisation.
func TestAHardStopDuringCheckpointsReturns(t *testing.T) {
	s := newFakeStream(t, 1)
	sink := &stuckCheckpointsSink{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(sink.release)
	l, err := New(Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon()}, fast, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Checkpoints not called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrStuck) || !errors.Is(err, ErrClosed) {
			t.Errorf("Run = %v, want a StuckError caused by ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5 s after Close's context ended while the Sink's Checkpoints ignores its context")
	}
}

// panicCheckpointsSink is a TransactionalSink whose Checkpoints panics.
type panicCheckpointsSink struct{}

func (panicCheckpointsSink) Deliver(ctx context.Context, b Batch) error { return nil }

func (panicCheckpointsSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	panic("bad checkpoints")
}

// A TransactionalSink whose Checkpoints panics stops Run with ErrSink (a
// PanicError), as a Deliver that panics does; the panic escaped Run into
// its caller (found by a review).
func TestACheckpointsPanicIsRecovered(t *testing.T) {
	s := newFakeStream(t, 1)
	l, err := New(Config{Stream: s.name, Sink: panicCheckpointsSink{}, StartPosition: scan.TrimHorizon()}, fast, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Run panicked: %v", r)
			}
		}()
		err = l.Run(ctx)
		if !errors.Is(err, ErrSink) || !errors.Is(err, ErrPanicked) {
			t.Errorf("Run = %v, want ErrSink wrapping a PanicError", err)
		}
	}()
}
