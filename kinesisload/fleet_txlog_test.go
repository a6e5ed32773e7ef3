package kinesisload_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
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
}
