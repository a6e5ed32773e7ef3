package kinesisload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// logBuffer is a bytes.Buffer safe for the Loader's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// slowCheckpoints is a host's handle on a txSink whose Checkpoints, after
// the first call (the initialisation's), does not answer before its ctx
// ends.
type slowCheckpoints struct {
	txHost
	calls atomic.Int32
}

func (s *slowCheckpoints) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	if s.calls.Add(1) > 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.txHost.Checkpoints(ctx, stream)
}

// A TransactionalSink whose Checkpoints times out when a host is granted
// leases: the shards resume from the fleet's progress, and the failure is
// logged (it was not, when the call's own deadline ended it).
func TestFleetSinkCheckpointsTimeoutLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		sink := newTxSink()
		slow := &slowCheckpoints{txHost: txHost{s: sink, host: "a"}}
		var logs logBuffer
		r.loggers = map[string]*slog.Logger{"a": slog.New(slog.NewTextHandler(&logs, nil))}
		r.hostConfig = func(host string, c *kinesisload.Config) {
			c.Sink = slow
			c.CallTimeout = 500 * time.Millisecond
		}
		r.start("a")
		want := r.putBatch(5)
		sink.waitStored(t, want)
		if slow.calls.Load() < 2 {
			t.Fatalf("Checkpoints was called %d times, want at the initialisation and when the lease was granted", slow.calls.Load())
		}
		const msg = "loading the sink's checkpoints for the leases acquired"
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("no warning %q in the log after Checkpoints timed out:\n%s", msg, logs.String())
		}
		r.close("a")
	})
}

// fencedStarts is a host's handle on a txSink that refuses every start
// batch (no records, epoch 0) as from a lost lease.
type fencedStarts struct {
	txHost
	starts atomic.Int32
}

func (s *fencedStarts) Deliver(ctx context.Context, b kinesisload.Batch) error {
	if len(b.Records) == 0 && b.Epoch == 0 {
		s.starts.Add(1)
		return fmt.Errorf("held at epoch 3: %w", kinesisload.ErrLeaseLost)
	}
	return s.txHost.Deliver(ctx, b)
}

// In a fleet too, a Sink's refusal of a start batch as from a lost lease
// (no lease was given for it) stops Run with ErrSink naming the shard: it
// is not the loss of the fleet's initialisation lock, after which the host
// would initialise again, for ever.
func TestFleetSinkLeaseLostOnStartBatchStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		sink := &fencedStarts{txHost: txHost{s: newTxSink(), host: "a"}}
		r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink }
		r.start("a")
		var err error
		select {
		case err = <-r.done["a"]:
			r.runs["a"]()
			delete(r.runs, "a") // stopped: nothing for the rig to close
		case <-time.After(30 * time.Second):
			t.Fatalf("Run did not stop; the start batch was refused %d times", sink.starts.Load())
		}
		re, ok := errors.AsType[*kinesisload.RunError](err)
		if !ok || !errors.Is(err, kinesisload.ErrSink) || re.Shard != txShard0 || re.Op != "Deliver" {
			t.Fatalf("Run = %v, want a *RunError of class ErrSink naming Deliver and %s", err, txShard0)
		}
		if n := sink.starts.Load(); n != 1 {
			t.Errorf("the start batch was delivered %d times, want once", n)
		}
	})
}
