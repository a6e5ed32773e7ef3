package scan_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// iteratorTimes records when (on the manual clock) each GetShardIterator
// was made; a call left unanswered takes a second of that clock, as one
// with the default ProbeTimeout would.
type iteratorTimes struct {
	scan.Client
	clock *kinesistest.ManualClock
	mu    sync.Mutex
	at    []time.Time
}

func (c *iteratorTimes) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.mu.Lock()
	c.at = append(c.at, c.clock.Now())
	c.mu.Unlock()
	out, err := c.Client.GetShardIterator(ctx, in, optFns...)
	if err != nil && ctx.Err() != nil {
		c.clock.Advance(time.Second)
	}
	return out, err
}

// TestUnansweredProbeControlIsPaced: the control call made after an
// unanswered probe is a GetShardIterator on the same shard like the probes,
// so it is paced with them: no two GetShardIterator calls of the shard come
// closer than CallInterval (Kinesis serves 5 per second per shard).
func TestUnansweredProbeControlIsPaced(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	w.putAt(t, "s", 2000, time.Millisecond)
	w.clock.Advance(3 * time.Second)
	cfg := w.testConfig(scan.StrategyProbe, 0)
	cfg.ProbeTimeout = 5 * time.Millisecond
	c := &iteratorTimes{Client: &silentPastLast{Client: w.fake}, clock: w.clock}
	res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}, At: w.clock.Now()})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if res[0].Stats.Unanswered == 0 {
		t.Fatalf("no probe went unanswered; the test proves nothing")
	}
	for i := 1; i < len(c.at); i++ {
		if d := c.at[i].Sub(c.at[i-1]); d < scan.DefaultCallInterval {
			t.Errorf("GetShardIterator calls %d and %d only %v apart, want at least %v", i-1, i, d, scan.DefaultCallInterval)
		}
	}
}
