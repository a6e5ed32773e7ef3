package kinesisload

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// stuckSink ignores its context: Deliver returns only when released, and
// then reports success.
type stuckSink struct {
	entered  chan struct{}
	release  chan struct{}
	returned chan struct{}
	once     sync.Once
}

func newStuckSink() *stuckSink {
	return &stuckSink{entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
}

func (s *stuckSink) Deliver(ctx context.Context, b Batch) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	defer func() { recover() }() // a second batch would close returned again
	close(s.returned)
	return nil
}

// runReturns waits a few seconds for Run to return by itself.
func runReturns(t *testing.T, r *running) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run hangs after the hard stop: a Sink that ignores its context holds it for ever")
		return nil
	}
}

// Close's deadline with a Sink that ignores cancellation: Close returns at
// its deadline, Run returns with a StuckError naming the shard, the
// journal's lock is released, and nothing is committed.
func TestCloseDeadlineWithStuckSink(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newFakeStream(t, 1)
	s.put(shard0, "only")
	dir := t.TempDir()
	sink := newStuckSink()
	defer close(sink.release)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: sink, Dir: dir, StartPosition: scan.TrimHorizon()}, WithClient(s.f))
	<-sink.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.l.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return at its deadline")
	}
	err := runReturns(t, r)
	var se *StuckError
	if !errors.As(err, &se) || !slices.Equal(se.Shards, []string{shard0}) || se.Stream != s.name {
		t.Fatalf("Run = %v, want a StuckError naming %s", err, shard0)
	}
	checkStop(t, err, s.name, shard0, "Deliver", ErrSink)
	if !errors.Is(err, ErrStuck) || !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), shard0) {
		t.Errorf("Run = %v: want errors.Is ErrStuck and ErrClosed, and the shard in the message", err)
	}
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatalf("the journal is still locked after Run returned: %v", err)
	}
	defer j.Close()
	store := memStore(t, j)
	p, _ := store.Load(context.Background(), s.name)
	if got := p[shard0].Position; got.Kind != scan.KindTrimHorizon {
		t.Errorf("shard 0 at %v, want its start: nothing committed", got)
	}
}

// uncancellableStore saves even when the caller's context has ended, as a
// PositionStore may: the Loader must not count on the store to refuse.
type uncancellableStore struct{ PositionStore }

func (s uncancellableStore) Save(ctx context.Context, stream string, u []ShardProgress) error {
	return s.PositionStore.Save(context.WithoutCancel(ctx), stream, u)
}

// A hard stop by Run's context, and the stuck Deliver returns nil later:
// its batch is never committed, even by a store that ignores cancellation.
func TestLateDeliverAfterRunReturnedIsNotCommitted(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "only")
	store := uncancellableStore{memStore(t, journal.NewMemory())}
	sink := newStuckSink()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(t, ctx, Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon()}, WithClient(s.f), WithStore(store))
	<-sink.entered
	cancel()
	err := runReturns(t, r)
	var se *StuckError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want a StuckError caused by context.Canceled", err)
	}
	// Every goroutine of the Loader but the stuck one has exited; release
	// it and wait for it to exit too, having tried its commit.
	ignore := goleak.IgnoreCurrent()
	close(sink.release)
	<-sink.returned
	goleak.VerifyNone(t, ignore)
	p, _ := store.Load(context.Background(), s.name)
	if got := p[shard0].Position; got.Kind != scan.KindTrimHorizon {
		t.Errorf("shard 0 at %v after Run returned: a late Deliver was committed", got)
	}
}

// panicHook panics in four hooks.
type panicHook struct{}

func (panicHook) OnBatchDelivered(BatchDelivered) { panic("delivered hook broke") }
func (panicHook) OnShardState(ShardStateChanged)  { panic(errBoom) }
func (panicHook) OnLeaseAcquired(LeaseAcquired)   { panic(errBoom) }
func (panicHook) OnLeaseHandedOff(LeaseHandedOff) { panic(errBoom) }

// syncBuffer is a bytes.Buffer safe for the Loader's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A panicking hook does not crash the host, nor stop the data: it is
// logged with its stack trace and counted, and the other hooks still run.
func TestHookPanicIsRecoveredAndLogged(t *testing.T) {
	s := newFakeStream(t, 1)
	var logs syncBuffer
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		WithHooks(panicHook{}, rec, ih), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ih.wait(t)
	s.put(shard0, "a")
	s.put(shard0, "b")
	rec.waitFor(t, "a", "b")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	out := logs.String()
	for _, want := range []string{"a hook panicked", "hook=OnBatchDelivered", "delivered hook broke", "hook=OnShardState", "panicHook.OnBatchDelivered", "panicHook.OnShardState", "hook=OnLeaseAcquired", "hook=OnLeaseHandedOff"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if n := r.l.hooks.panics.Load(); n < 2 {
		t.Errorf("%d hook panics counted, want at least 2 (a batch, a state change)", n)
	}
	if states := indexOf(rec.events(), func(e event) bool { return e.kind == "state" }); states < 0 {
		t.Errorf("the recorder's state hook did not run after the panicking one")
	}
}

// A panicking Sink stops Run with a PanicError that keeps the stack.
func TestSinkPanicKeepsTheStack(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	sink := SinkFunc(func(context.Context, Batch) error { panic(errBoom) })
	r := start(t, context.Background(), Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), SinkRetries: 1},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	pe, ok := errors.AsType[*PanicError](err)
	if !ok || !errors.Is(err, ErrPanicked) || !errors.Is(err, errBoom) {
		t.Fatalf("Run = %v, want a PanicError wrapping ErrPanicked and the panic's error", err)
	}
	if !strings.Contains(string(pe.Stack), "TestSinkPanicKeepsTheStack") || !strings.Contains(err.Error(), "TestSinkPanicKeepsTheStack") {
		t.Errorf("the stack does not name the panicking function:\n%s", pe.Stack)
	}
	if !strings.Contains(err.Error(), shard0) {
		t.Errorf("Run = %v, want the shard named", err)
	}
}
