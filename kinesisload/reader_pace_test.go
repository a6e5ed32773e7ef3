package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/scan"
)

// A GetRecords call that waited for the buffer budget after the pacer let
// it through reaches Kinesis later than the pacer thinks: the next call
// must be spaced from when the call was made, or two calls come closer
// than 200 ms and a shard's calls bunch up past 5 in a second (the fake
// throttles them).
func TestReaderSpacesCallsFromWhenTheyAreMadeAfterWaitingForTheBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t) // the real limits
	e.put("r", 3, 0, time.Millisecond)
	cfg := e.config(scan.TrimHorizon())
	cfg.limit = 1
	cfg.maxPage = 1000
	cfg.buffer = newBudget(cfg.maxPage)
	ctx := context.Background()
	// Another shard holds the whole budget: the reader's first call waits.
	other, err := cfg.buffer.acquire(ctx, cfg.maxPage)
	if err != nil {
		t.Fatal(err)
	}
	run := startReader(t, cfg)
	deadline := time.Now().Add(rdGuard)
	for {
		cfg.buffer.mu.Lock()
		waiting := cfg.buffer.waiters.Len()
		cfg.buffer.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader never waited for the budget")
		}
		time.Sleep(time.Millisecond)
	}
	e.mc.Advance(150 * time.Millisecond) // the other shard's page is delivered
	cfg.buffer.release(other)
	for range 3 {
		p, ok := run.next()
		if !ok {
			t.Fatalf("reader returned %v", run.err)
		}
		cfg.buffer.release(p.held)
	}
	run.cancel()
	if err := run.wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("run after cancel = %v, want context.Canceled", err)
	}
	times := e.client.times()
	if len(times) < 3 {
		t.Fatalf("%d GetRecords calls, want 3", len(times))
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < readerDefaultMinInterval {
			t.Errorf("call %d came %v after call %d, want at least %v", i+1, gap, i, readerDefaultMinInterval)
		}
	}
}

// Calls paced exactly 200 ms apart as they leave reach Kinesis unevenly
// when the network (or a pause of the process) delays them unevenly: one
// delayed more than the fifth call after it puts six in Kinesis's second,
// and it is throttled. The reader keeps a margin over every six calls in
// a row, counted from when Kinesis served the first (its answer less the
// shortest round trip), so neither a few milliseconds of jitter nor a
// call stalled on its way is throttled.
func TestReaderAbsorbsLatencyJitterInTheCallWindow(t *testing.T) {
	for _, extra := range []time.Duration{3 * time.Millisecond, 30 * time.Millisecond} {
		t.Run(extra.String(), func(t *testing.T) { testReaderJitter(t, extra) })
	}
}

func testReaderJitter(t *testing.T, extra time.Duration) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t) // the real limits
	const records = 60
	want := e.put("r", records, 0, time.Millisecond)
	cfg := e.config(scan.TrimHorizon())
	cfg.limit = 2 // small pages: the calls per second bind, not the bytes
	// Every call takes 30 ms to reach Kinesis, every sixth from the third
	// extra more (the first has no round trip to compare with).
	e.client.before = func(_ context.Context, n int, _ *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
		lat := 30 * time.Millisecond
		if n%6 == 3 {
			lat += extra
		}
		e.mc.Advance(lat)
		return nil, nil
	}
	throttled := 0
	cfg.hooks.onThrottle = func(string, string, int, time.Duration, error) { throttled++ }
	pages := startReader(t, cfg).readN(records)
	if diff := cmp.Diff(want, rdData(pages)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if s := e.stats(); s.GetRecordsThrottled != 0 || throttled != 0 {
		t.Errorf("throttled %d times by the fake (%d reported), want 0", s.GetRecordsThrottled, throttled)
	}
}
