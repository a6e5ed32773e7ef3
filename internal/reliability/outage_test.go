package reliability

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/faultproxy"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// down is an unreachable Kinesis: every request fails, half with a reset
// connection, half with a 500 or 503.
var down = faultproxy.Rates{Reset: 0.5, ServerError: 0.5}

// retryCounter is a hook that keeps, per operation and shard, the highest
// attempt count a Retry reported, and how many retries there were.
type retryCounter struct {
	mu      sync.Mutex
	attempt map[[2]string]int
	total   int
}

func (h *retryCounter) OnRetry(e kinesisload.Retry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.attempt == nil {
		h.attempt = map[[2]string]int{}
	}
	k := [2]string{e.Op, e.ShardID}
	h.attempt[k] = max(h.attempt[k], e.Attempt)
	h.total++
}

// max returns the highest attempt reported for op on shard ("" for a call
// about the stream).
func (h *retryCounter) max(op, shard string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempt[[2]string{op, shard}]
}

func (h *retryCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempt, h.total = nil, 0
}

// outage makes Kinesis unreachable through proxy for window, failing the
// test if Run returns meanwhile.
func outage(t *testing.T, r *inproc, proxy *faultproxy.Proxy, window time.Duration) {
	t.Helper()
	if err := proxy.SetAll(down); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v during the outage, want it to keep retrying", err)
	case <-time.After(window):
	}
	if err := proxy.SetAll(faultproxy.Rates{}); err != nil {
		t.Fatal(err)
	}
}

// TestOutage makes Kinesis unreachable (the fault proxy fails every
// request: connection resets and 5xx) for a time window during the
// Loader's start-up, and again mid-stream while records keep arriving. The
// Loader keeps going, its hooks show the retries, and after each outage it
// catches up: every record written after its initialisation is delivered,
// in shard order. The window is 20 s; 2 minutes with -reliability.long.
func TestOutage(t *testing.T) {
	window := 20 * time.Second
	switch {
	case longForm():
		window = 2 * time.Minute
	case testing.Short():
		window = 8 * time.Second
	}
	emu := emulator.Start(t, emulator.KinesisLocal)
	api := killloop.NewTestClient(t, emu.Endpoint) // the producer's: no faults
	ctx, cancel := context.WithTimeout(context.Background(), 2*window+3*time.Minute)
	defer cancel()
	const stream = "outage"
	killloop.CreateStream(ctx, t, api, stream, 2)
	history := putN(ctx, t, api, stream, "h", 4)
	// LATEST resolves at T0, Kinesis's Date floored to the second: let the
	// history be older than the second before the start.
	time.Sleep(2 * time.Second)
	proxy, err := faultproxy.New(faultproxy.Config{Upstream: emu.Endpoint, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	hooks := &retryCounter{}
	sink := &memSink{}
	cfg := kinesisload.Config{Stream: stream, Sink: sink, Dir: t.TempDir(), StartPosition: scan.Latest(),
		IdleWait: 200 * time.Millisecond, ListShardsInterval: time.Second, CallTimeout: 5 * time.Second,
		// Backoffs of 0.2 s to 2 s: the retries the checks count fit in
		// the short form's outage of 10 s with room to spare.
		KinesisBackoff: 200 * time.Millisecond, KinesisMaxBackoff: 2 * time.Second}

	// During start-up: nothing answers from the first call on.
	if err := proxy.SetAll(down); err != nil {
		t.Fatal(err)
	}
	r := runLoader(t, cfg, kinesisload.WithClient(killloop.NewTestClient(t, proxy.URL())), kinesisload.WithHooks(hooks))
	outage(t, r, proxy, window)
	r.waitInit(t)
	// The old bound was 5 attempts of the start-up's calls: far more were
	// made (of DescribeStreamSummary, the stream's identity, which comes
	// first, or of ListShards).
	first := max(hooks.max("DescribeStreamSummary", ""), hooks.max("ListShards", ""))
	if first < 6 {
		t.Errorf("the start-up's first call was retried %d times during the outage, want at least 6 (the hooks must show the retries)", first)
	}
	if st := r.l.Stats(); !st.Initialised || st.Retries < 6 || st.LastError == "" {
		t.Errorf("Stats after the start-up outage = %+v, want initialised, its retries and last error", st)
	}
	t.Logf("start-up outage of %v: the first call tried %d times", window, first)

	prod := killloop.StartProducer(ctx, func(ctx context.Context, data []string) ([]written, error) {
		return killloop.PutAll(ctx, api, stream, data)
	})
	time.Sleep(2 * time.Second) // some records read before the outage
	hooks.reset()
	outage(t, r, proxy, window)
	produced, perr := prod.Finish()
	if perr != nil {
		t.Fatalf("producer: %v", perr)
	}
	sink.waitFor(t, r, produced)
	for _, sh := range killloop.ListShards(ctx, t, api, stream) {
		id := *sh.ShardId
		if n := hooks.max("GetRecords", id); n < 6 {
			t.Errorf("GetRecords on %s retried %d times during the outage, want at least 6", id, n)
		}
	}
	t.Logf("mid-stream outage of %v: %d records written, %d retries", window, len(produced), hooks.total)

	got := sink.lines()
	seen := map[string]bool{}
	last := map[string]string{}
	for _, l := range got {
		seen[l.data] = true
		if p, ok := last[l.shard]; ok && scan.CompareSequence(l.seq, p) < 0 {
			t.Errorf("shard %s: %s delivered after %s", l.shard, l.seq, p)
		}
		last[l.shard] = l.seq
	}
	for _, h := range history {
		if seen[h.Data] {
			t.Errorf("%s was written before the start (LATEST) and delivered", h.Data)
		}
	}
	missing := 0
	for _, w := range produced {
		if !seen[w.Data] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d records lost", missing, len(produced))
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v, want it running", err)
	default:
	}
	if err := r.l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.result(t, 10*time.Second); !errors.Is(err, kinesisload.ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}
