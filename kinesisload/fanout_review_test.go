package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// A SubscribeToShard call that does not answer within CallTimeout is a
// timeout, retried like every other Kinesis call, not a failure that
// stops Run.
func TestFanOutSubscribeTimeoutIsRetried(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	never := make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: 1, Block: never})
	rec := newRecorder()
	cfg := fanOutConfig(s, rec)
	cfg.CallTimeout = 100 * time.Millisecond
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, "a")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if diff := cmp.Diff([]string{"a"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
