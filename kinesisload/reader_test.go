package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// The reader tests run the reader against the in-memory Kinesis on a
// manual clock. The reader's own waits (pacing, backoff, idle) move that
// clock instead of sleeping, so the fake's iterator expiry and throughput
// limits see exactly the time the reader spent waiting.

const (
	rdStream = "orders"
	rdShard  = "shardId-000000000000"
	// rdGuard only keeps a broken reader from hanging the test binary.
	rdGuard = 10 * time.Second
)

// rdClock is a backoff.Clock over the fake's manual clock: Sleep moves the
// clock forward at once and records the wait. If block is set and says so
// for a wait, Sleep instead reports on blocked and waits for ctx to end.
type rdClock struct {
	mc      *kinesistest.ManualClock
	block   func(d time.Duration) bool
	blocked chan time.Duration

	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *rdClock) Now() time.Time { return c.mc.Now() }

func (c *rdClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if c.block != nil && c.block(d) {
		select {
		case c.blocked <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-ctx.Done()
		return ctx.Err()
	}
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	c.mc.Advance(d)
	return nil
}

func (c *rdClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// rdClient wraps the fake. It records the clock time of every GetRecords
// call, and lets a test act before (or instead of) and after chosen calls.
// The functions run on the reader's goroutine, so what they do happens at
// an exact point of the reader's work.
type rdClient struct {
	scan.Client
	clock *kinesistest.ManualClock

	// before is called before GetRecords call n (from 1); a non-nil
	// output or error is returned instead of calling the fake.
	before func(ctx context.Context, n int, in *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error)
	// after is called after GetRecords call n returned.
	after func(n int)
	// iterator, if set, answers GetShardIterator instead of the fake.
	iterator func(n int, in *kinesis.GetShardIteratorInput) (*kinesis.GetShardIteratorOutput, error)

	mu        sync.Mutex
	n, nIter  int
	callTimes []time.Time
}

func (c *rdClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.mu.Lock()
	c.n++
	n := c.n
	c.callTimes = append(c.callTimes, c.clock.Now())
	c.mu.Unlock()
	if c.before != nil {
		if out, err := c.before(ctx, n, in); out != nil || err != nil {
			return out, err
		}
	}
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if c.after != nil {
		c.after(n)
	}
	return out, err
}

func (c *rdClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.mu.Lock()
	c.nIter++
	n := c.nIter
	c.mu.Unlock()
	if c.iterator != nil {
		return c.iterator(n, in)
	}
	return c.Client.GetShardIterator(ctx, in, opts...)
}

func (c *rdClient) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.callTimes...)
}

// rdRecv receives from ch, failing the test if nothing comes.
func rdRecv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(rdGuard):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// rdEnv is one test's Kinesis: a fake with one stream of one shard.
type rdEnv struct {
	t      *testing.T
	fake   *kinesistest.Fake
	mc     *kinesistest.ManualClock
	clock  *rdClock
	client *rdClient
}

func newRDEnv(t *testing.T, opts ...kinesistest.Option) *rdEnv {
	t.Helper()
	mc := kinesistest.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := kinesistest.New(append([]kinesistest.Option{kinesistest.WithClock(mc)}, opts...)...)
	kinesistest.NewStream(t, f, rdStream, 1)
	return &rdEnv{
		t:      t,
		fake:   f,
		mc:     mc,
		clock:  &rdClock{mc: mc, blocked: make(chan time.Duration, 1)},
		client: &rdClient{Client: f, clock: mc},
	}
}

// put writes n records whose data are prefix0, prefix1, ..., of size bytes
// at least, one every step on the clock, and returns their data.
func (e *rdEnv) put(prefix string, n, size int, step time.Duration) []string {
	e.t.Helper()
	var data []string
	for i := range n {
		d := fmt.Sprintf("%s%03d", prefix, i)
		payload := []byte(d)
		if len(payload) < size {
			payload = append(payload, make([]byte, size-len(payload))...)
		}
		if _, err := e.fake.PutRecord(context.Background(), &kinesis.PutRecordInput{
			StreamName: aws.String(rdStream), PartitionKey: aws.String("k"), Data: payload,
		}); err != nil {
			e.t.Fatalf("put %s: %v", d, err)
		}
		data = append(data, d)
		e.mc.Advance(step)
	}
	return data
}

// split closes the shard; its two children are returned.
func (e *rdEnv) split() []string {
	e.t.Helper()
	if _, err := e.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName: aws.String(rdStream), ShardToSplit: aws.String(rdShard),
		NewStartingHashKey: aws.String("170141183460469231731687303715884105728"),
	}); err != nil {
		e.t.Fatalf("split: %v", err)
	}
	return []string{"shardId-000000000001", "shardId-000000000002"}
}

func (e *rdEnv) config(start scan.Position) readerConfig {
	half := func() float64 { return 0.5 }
	return readerConfig{
		client:   e.client,
		stream:   rdStream,
		shard:    rdShard,
		start:    start,
		clock:    e.clock,
		retry:    backoff.Policy{Rand: half},
		throttle: backoff.Policy{Rand: half},
	}
}

func (e *rdEnv) stats() kinesistest.ShardStats {
	e.t.Helper()
	s, err := e.fake.Stats(rdStream, rdShard)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// rdRun is a reader running on its own goroutine, feeding an unbuffered
// channel.
type rdRun struct {
	t      *testing.T
	out    chan page
	errc   chan error
	cancel context.CancelFunc
	err    error
	done   bool
}

func startReader(t *testing.T, cfg readerConfig) *rdRun {
	t.Helper()
	r, err := newReader(cfg)
	if err != nil {
		t.Fatalf("newReader: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &rdRun{t: t, out: make(chan page), errc: make(chan error, 1), cancel: cancel}
	go func() { run.errc <- r.run(ctx, run.out) }()
	t.Cleanup(func() {
		cancel()
		if !run.done {
			select {
			case <-run.errc:
			case <-time.After(rdGuard):
				t.Error("reader did not return after its context was cancelled")
			}
		}
	})
	return run
}

// next returns the next page, or ok false once run has returned.
func (r *rdRun) next() (p page, ok bool) {
	r.t.Helper()
	if r.done {
		return page{}, false
	}
	select {
	case p := <-r.out:
		return p, true
	case err := <-r.errc:
		r.err, r.done = err, true
		return page{}, false
	case <-time.After(rdGuard):
		r.t.Fatal("reader neither sent a page nor returned")
	}
	return page{}, false
}

// wait returns run's result.
func (r *rdRun) wait() error {
	r.t.Helper()
	if !r.done {
		select {
		case err := <-r.errc:
			r.err, r.done = err, true
		case <-time.After(rdGuard):
			r.t.Fatal("reader did not return")
		}
	}
	return r.err
}

// drain reads pages until run returns.
func (r *rdRun) drain() ([]page, error) {
	r.t.Helper()
	var pages []page
	for {
		p, ok := r.next()
		if !ok {
			return pages, r.err
		}
		pages = append(pages, p)
	}
}

// readN reads pages until n records have come, then stops the reader.
func (r *rdRun) readN(n int) []page {
	r.t.Helper()
	var pages []page
	for got := 0; got < n; {
		p, ok := r.next()
		if !ok {
			r.t.Fatalf("reader returned %v after %d of %d records", r.err, got, n)
		}
		pages = append(pages, p)
		got += len(p.records)
	}
	r.cancel()
	if err := r.wait(); !errors.Is(err, context.Canceled) {
		r.t.Errorf("run after cancel = %v, want context.Canceled", err)
	}
	return pages
}

func rdData(pages []page) []string {
	var out []string
	for _, p := range pages {
		for _, rec := range p.records {
			out = append(out, strings.TrimRight(string(rec.Data), "\x00"))
		}
	}
	return out
}

func rdSizes(pages []page) []int {
	var out []int
	for _, p := range pages {
		out = append(out, len(p.records))
	}
	return out
}

func rdLastSeq(p page) string {
	return aws.ToString(p.records[len(p.records)-1].SequenceNumber)
}

func TestReaderReadsClosedShardToTheEnd(t *testing.T) {
	tests := []struct {
		name    string
		records int
		limit   int32
		sizes   []int
	}{
		{"partial last page", 25, 4, []int{4, 4, 4, 4, 4, 4, 1}},
		{"full last page", 24, 6, []int{6, 6, 6, 6}},
		{"one page", 3, 0, []int{3}},
		{"no records: empty end page", 0, 4, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			e := newRDEnv(t, kinesistest.WithoutLimits())
			want := e.put("r", tt.records, 0, time.Millisecond)
			children := e.split()
			cfg := e.config(scan.TrimHorizon())
			cfg.limit = tt.limit
			pages, err := startReader(t, cfg).drain()
			if err != nil {
				t.Fatalf("run = %v, want nil after the end page", err)
			}
			if diff := cmp.Diff(want, rdData(pages)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.sizes, rdSizes(pages)); diff != "" {
				t.Errorf("page sizes (-want +got):\n%s", diff)
			}
			for i, p := range pages[:len(pages)-1] {
				if p.end || p.children != nil {
					t.Errorf("page %d of %d is marked end=%v children=%v", i, len(pages), p.end, p.children)
				}
			}
			last := pages[len(pages)-1]
			if !last.end {
				t.Errorf("last page end = false, want true")
			}
			var got []string
			for _, c := range last.children {
				got = append(got, aws.ToString(c.ShardId))
			}
			if diff := cmp.Diff(children, got); diff != "" {
				t.Errorf("end page children (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReaderFollowsEmptyPagesMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	want := e.put("r", 12, 0, time.Millisecond)
	e.split()
	// Calls 2, 3 and 5 return an empty page that is behind the tip and
	// hands back the same iterator, as Kinesis does over a gap in a shard.
	empty := map[int]bool{2: true, 3: true, 5: true}
	e.client.before = func(_ context.Context, n int, in *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
		if empty[n] {
			return &kinesis.GetRecordsOutput{NextShardIterator: in.ShardIterator, MillisBehindLatest: aws.Int64(5000)}, nil
		}
		return nil, nil
	}
	var fetched []int
	cfg := e.config(scan.TrimHorizon())
	cfg.limit = 4
	cfg.idleWait = 7 * time.Second
	cfg.hooks.onFetch = func(_ string, records int, _, _ int64) { fetched = append(fetched, records) }
	pages, err := startReader(t, cfg).drain()
	if err != nil {
		t.Fatalf("run = %v", err)
	}
	if diff := cmp.Diff(want, rdData(pages)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{4, 4, 4}, rdSizes(pages)); diff != "" {
		t.Errorf("pages sent (-want +got): empty pages must not be sent\n%s", diff)
	}
	if diff := cmp.Diff([]int{4, 0, 0, 4, 0, 4}, fetched); diff != "" {
		t.Errorf("pages fetched (-want +got):\n%s", diff)
	}
	for _, d := range e.clock.waits() {
		if d == cfg.idleWait {
			t.Errorf("reader waited idleWait after an empty page behind the tip; waits: %v", e.clock.waits())
			break
		}
	}
}

func TestReaderWaitsIdleWaitAtTheTip(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	want := e.put("r", 3, 0, time.Millisecond)
	const idle = 1500 * time.Millisecond
	cfg := e.config(scan.TrimHorizon())
	cfg.idleWait = idle
	// On the 2nd empty poll a record arrives; the reader must pick it up
	// on a later poll.
	empties := 0
	cfg.hooks.onFetch = func(_ string, records int, _, _ int64) {
		if records == 0 {
			empties++
			if empties == 2 {
				if _, err := e.fake.PutRecord(context.Background(), &kinesis.PutRecordInput{
					StreamName: aws.String(rdStream), PartitionKey: aws.String("k"), Data: []byte("late"),
				}); err != nil {
					t.Errorf("put: %v", err)
				}
			}
		}
	}
	run := startReader(t, cfg)
	pages := run.readN(4)
	want = append(want, "late")
	if diff := cmp.Diff(want, rdData(pages)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	// Calls: the 3 records, empty, empty (the late record is put), the
	// late record. Between two polls there is the pacing interval, except
	// after an empty page at the tip, when it is idleWait.
	times := e.client.times()
	if len(times) < 4 {
		t.Fatalf("%d GetRecords calls, want at least 4", len(times))
	}
	var gaps []time.Duration
	for i := 1; i < 4; i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	wantGaps := []time.Duration{readerDefaultMinInterval, idle, idle}
	if diff := cmp.Diff(wantGaps, gaps); diff != "" {
		t.Errorf("time between GetRecords calls (-want +got):\n%s", diff)
	}
}

// rdMaxPerSecond returns the largest number of calls in any one-second
// window [t, t+1s).
func rdMaxPerSecond(times []time.Time) int {
	most := 0
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

func TestReaderStaysWithinRealLimits(t *testing.T) {
	tests := []struct {
		name    string
		records int
		size    int
		step    time.Duration
		limit   int32
		// minCalls makes sure the limit is exercised.
		minCalls int
	}{
		// Many small pages: the 5 calls/s limit is the one that bites.
		{"calls per second", 120, 0, time.Millisecond, 3, 40},
		// Pages of 2.5 MB: the 2 MiB/s read limit is the one that bites
		// (the second call would be throttled without byte pacing).
		{"bytes per second", 150, 100_000, 100 * time.Millisecond, 25, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			e := newRDEnv(t) // the real limits
			want := e.put("r", tt.records, tt.size, tt.step)
			cfg := e.config(scan.TrimHorizon())
			cfg.limit = tt.limit
			throttled := 0
			cfg.hooks.onThrottle = func(string, string, int, time.Duration, error) { throttled++ }
			pages := startReader(t, cfg).readN(tt.records)
			if diff := cmp.Diff(want, rdData(pages)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if s := e.stats(); s.GetRecordsThrottled != 0 || throttled != 0 {
				t.Errorf("throttled %d times by the fake (%d reported), want 0", s.GetRecordsThrottled, throttled)
			}
			times := e.client.times()
			if n := rdMaxPerSecond(times); n > 5 {
				t.Errorf("%d GetRecords calls in one second, want at most 5", n)
			}
			if len(times) < tt.minCalls {
				t.Errorf("only %d calls, want at least %d: the test does not exercise the limit", len(times), tt.minCalls)
			}
		})
	}
}

func TestReaderRidesOutThrottlingStorm(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	want := e.put("r", 20, 0, time.Millisecond)
	const storm = 8
	pte := &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard")}
	var remove func()
	// From the 3rd GetRecords call on, every call is throttled until the
	// storm has lasted storm calls.
	e.client.before = func(_ context.Context, n int, _ *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
		if n == 3 {
			remove = e.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: pte})
		}
		return nil, nil
	}
	cfg := e.config(scan.TrimHorizon())
	cfg.limit = 4
	var waits []time.Duration
	cfg.hooks.onThrottle = func(shard, op string, _ int, wait time.Duration, err error) {
		if shard != rdShard || op != "GetRecords" || !kerr.IsThrottled(err) {
			t.Errorf("onThrottle(%q, %q, %v, %v)", shard, op, wait, err)
		}
		waits = append(waits, wait)
		if len(waits) == storm {
			remove()
		}
	}
	cfg.hooks.onRetry = func(_, _ string, _ int, _ time.Duration, err error) {
		t.Errorf("onRetry called for %v; throttling has its own hook", err)
	}
	pages := startReader(t, cfg).readN(len(want))
	if diff := cmp.Diff(want, rdData(pages)); diff != "" {
		t.Errorf("records (-want +got): nothing lost, nothing repeated\n%s", diff)
	}
	var wantWaits []time.Duration
	for i := 1; i <= storm; i++ {
		wantWaits = append(wantWaits, readerDefaultThrottle.Ceiling(i)*3/4) // equal jitter at 0.5
	}
	if diff := cmp.Diff(wantWaits, waits); diff != "" {
		t.Errorf("throttle backoff (-want +got):\n%s", diff)
	}
	// The backoff was really waited: each is on the clock.
	slept := e.clock.waits()
	for _, w := range wantWaits {
		found := false
		for _, s := range slept {
			found = found || s == w
		}
		if !found {
			t.Errorf("backoff %v was not waited; waits: %v", w, slept)
		}
	}
}

func TestReaderRenewsExpiredIterator(t *testing.T) {
	t.Run("before the first record", func(t *testing.T) {
		starts := []scan.Position{
			scan.TrimHorizon(),
			scan.AtTimestamp(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		}
		for _, start := range starts {
			t.Run(start.Kind.String(), func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
				e := newRDEnv(t, kinesistest.WithoutLimits())
				want := e.put("r", 10, 0, time.Millisecond)
				e.client.before = func(_ context.Context, n int, _ *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
					if n == 1 {
						e.mc.Advance(301 * time.Second) // the first iterator expires unused
					}
					return nil, nil
				}
				cfg := e.config(start)
				cfg.limit = 4
				var renewed []scan.Position
				cfg.hooks.onIteratorRenewed = func(_ string, from scan.Position) { renewed = append(renewed, from) }
				pages := startReader(t, cfg).readN(len(want))
				if diff := cmp.Diff(want, rdData(pages)); diff != "" {
					t.Errorf("records (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]scan.Position{start}, renewed); diff != "" {
					t.Errorf("renewed at (-want +got): the start position again\n%s", diff)
				}
				if n := e.stats().GetShardIteratorCalls; n != 2 {
					t.Errorf("GetShardIterator calls = %d, want 2", n)
				}
			})
		}
	})

	t.Run("while the consumer holds a page", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		want := e.put("r", 10, 0, time.Millisecond)
		// Call 2 waits until the consumer, holding page 1, has let
		// more than 300 s pass.
		release := make(chan struct{})
		e.client.before = func(ctx context.Context, n int, _ *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
			if n == 2 {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return nil, nil
		}
		cfg := e.config(scan.TrimHorizon())
		cfg.limit = 4
		var renewed []scan.Position
		cfg.hooks.onIteratorRenewed = func(_ string, from scan.Position) { renewed = append(renewed, from) }
		run := startReader(t, cfg)
		first, ok := run.next()
		if !ok {
			t.Fatalf("run = %v before the first page", run.err)
		}
		e.mc.Advance(301 * time.Second)
		close(release)
		pages := append([]page{first}, run.readN(len(want)-len(first.records))...)
		if diff := cmp.Diff(want, rdData(pages)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]scan.Position{scan.AfterSequence(rdLastSeq(first))}, renewed); diff != "" {
			t.Errorf("renewed at (-want +got): after the last record sent\n%s", diff)
		}
	})

	t.Run("while the reader is blocked on a send", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		want := e.put("r", 10, 0, time.Millisecond)
		fetched2 := make(chan struct{})
		e.client.after = func(n int) {
			if n == 2 {
				close(fetched2)
			}
		}
		cfg := e.config(scan.TrimHorizon())
		cfg.limit = 4
		var renewed []scan.Position
		cfg.hooks.onIteratorRenewed = func(_ string, from scan.Position) { renewed = append(renewed, from) }
		run := startReader(t, cfg)
		first, ok := run.next()
		if !ok {
			t.Fatalf("run = %v before the first page", run.err)
		}
		// Page 2 is fetched and waits to be sent; its next iterator
		// expires while the consumer still holds page 1.
		rdRecv(t, fetched2, "the second GetRecords call")
		e.mc.Advance(301 * time.Second)
		second, ok := run.next()
		if !ok {
			t.Fatalf("run = %v before the second page", run.err)
		}
		rest := run.readN(len(want) - len(first.records) - len(second.records))
		pages := append([]page{first, second}, rest...)
		if diff := cmp.Diff(want, rdData(pages)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]scan.Position{scan.AfterSequence(rdLastSeq(second))}, renewed); diff != "" {
			t.Errorf("renewed at (-want +got): after the last record sent\n%s", diff)
		}
	})

	t.Run("expiring again and again is an error when attempts are bounded", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		e.put("r", 3, 0, time.Millisecond)
		e.client.before = func(context.Context, int, *kinesis.GetRecordsInput) (*kinesis.GetRecordsOutput, error) {
			e.mc.Advance(301 * time.Second)
			return nil, nil
		}
		cfg := e.config(scan.TrimHorizon())
		cfg.maxAttempts = 5
		renewals := 0
		cfg.hooks.onIteratorRenewed = func(string, scan.Position) { renewals++ }
		pages, err := startReader(t, cfg).drain()
		if len(pages) != 0 {
			t.Errorf("got %d pages, want none", len(pages))
		}
		if !kerr.IsExpiredIterator(err) || !strings.Contains(err.Error(), "stream "+rdStream+" shard "+rdShard) {
			t.Errorf("run = %v, want an ExpiredIteratorException naming stream and shard", err)
		}
		if want := cfg.maxAttempts; renewals != want {
			t.Errorf("renewals = %d, want %d", renewals, want)
		}
	})
}

func TestReaderFailures(t *testing.T) {
	internal := &types.InternalFailureException{Message: aws.String("internal failure")}
	denied := &types.InvalidArgumentException{Message: aws.String("bad request")}
	tests := []struct {
		name string
		// shard to read; rdShard if empty.
		shard string
		// fault injected in the fake, if Op is set.
		fault kinesistest.Fault
		// what the error must wrap and say.
		is    func(error) bool
		says  string
		calls map[kinesistest.Op]int
		// retries reported to onRetry.
		retries []int
	}{
		{
			name:  "unknown shard",
			shard: "shardId-000000000009",
			is:    kerr.IsNotFound,
			says:  "stream " + rdStream + " shard shardId-000000000009: GetShardIterator: ",
			calls: map[kinesistest.Op]int{kinesistest.OpGetShardIterator: 1, kinesistest.OpGetRecords: 0},
		},
		{
			name:  "non-retryable GetRecords error",
			fault: kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 1, Err: denied},
			is:    func(err error) bool { var e *types.InvalidArgumentException; return errors.As(err, &e) },
			says:  "stream " + rdStream + " shard " + rdShard + ": GetRecords: ",
			calls: map[kinesistest.Op]int{kinesistest.OpGetShardIterator: 1, kinesistest.OpGetRecords: 1},
		},
		{
			name:    "GetRecords retries exhausted",
			fault:   kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: internal},
			is:      func(err error) bool { var e *types.InternalFailureException; return errors.As(err, &e) },
			says:    "stream " + rdStream + " shard " + rdShard + ": GetRecords: failed 5 times, giving up: ",
			calls:   map[kinesistest.Op]int{kinesistest.OpGetShardIterator: 1, kinesistest.OpGetRecords: 5},
			retries: []int{1, 2, 3, 4},
		},
		{
			name:    "GetShardIterator retries exhausted",
			fault:   kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Err: internal},
			is:      func(err error) bool { var e *types.InternalFailureException; return errors.As(err, &e) },
			says:    "stream " + rdStream + " shard " + rdShard + ": GetShardIterator: failed 5 times, giving up: ",
			calls:   map[kinesistest.Op]int{kinesistest.OpGetShardIterator: 5, kinesistest.OpGetRecords: 0},
			retries: []int{1, 2, 3, 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			e := newRDEnv(t, kinesistest.WithoutLimits())
			e.put("r", 5, 0, time.Millisecond)
			if tt.fault.Op != "" {
				e.fake.Inject(tt.fault)
			}
			cfg := e.config(scan.TrimHorizon())
			cfg.maxAttempts = 5 // bounded (Config.KinesisMaxAttempts), to see it give up
			if tt.shard != "" {
				cfg.shard = tt.shard
			}
			var retries []int
			var waits []time.Duration
			cfg.hooks.onRetry = func(_, _ string, attempt int, wait time.Duration, _ error) {
				retries = append(retries, attempt)
				waits = append(waits, wait)
			}
			pages, err := startReader(t, cfg).drain()
			if len(pages) != 0 {
				t.Errorf("got %d pages, want none", len(pages))
			}
			if err == nil || !tt.is(err) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("run = %v, want an error wrapping the Kinesis error and saying %q", err, tt.says)
			}
			got := map[kinesistest.Op]int{}
			for op := range tt.calls {
				got[op] = e.fake.Calls(op)
			}
			if diff := cmp.Diff(tt.calls, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.retries, retries); diff != "" {
				t.Errorf("retries reported (-want +got):\n%s", diff)
			}
			var wantWaits []time.Duration
			for _, a := range tt.retries {
				wantWaits = append(wantWaits, readerDefaultRetry.Ceiling(a)*3/4)
			}
			if diff := cmp.Diff(wantWaits, waits); diff != "" {
				t.Errorf("retry backoff (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReaderBoundedThrottling(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	e.put("r", 5, 0, time.Millisecond)
	e.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}})
	cfg := e.config(scan.TrimHorizon())
	cfg.maxThrottles = 3
	_, err := startReader(t, cfg).drain()
	if !kerr.IsThrottled(err) || !strings.Contains(err.Error(), "stream "+rdStream+" shard "+rdShard+": GetRecords: still throttled after 3 retries") {
		t.Fatalf("run = %v, want a throttling error after 3 retries naming stream and shard", err)
	}
	if n := e.fake.Calls(kinesistest.OpGetRecords); n != 4 {
		t.Errorf("GetRecords calls = %d, want 4", n)
	}
}

func TestReaderClosedShardWithoutIterator(t *testing.T) {
	// Kinesis may answer GetShardIterator with no iterator for a closed
	// shard when nothing is left to read from the position. ListShards
	// confirms that the shard is closed.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	e.split()
	e.client.iterator = func(int, *kinesis.GetShardIteratorInput) (*kinesis.GetShardIteratorOutput, error) {
		return &kinesis.GetShardIteratorOutput{}, nil
	}
	pages, err := startReader(t, e.config(scan.AfterSequence("49000000000000000000000000000000000000000000000000000000"))).drain()
	if err != nil {
		t.Fatalf("run = %v, want nil", err)
	}
	if diff := cmp.Diff([]int{0}, rdSizes(pages)); diff != "" || !pages[0].end {
		t.Fatalf("pages %v (-want +got sizes):\n%s; want one empty end page", pages, diff)
	}
	if n := e.fake.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("GetRecords calls = %d, want 0", n)
	}
}

func TestReaderCancel(t *testing.T) {
	t.Run("blocked on send", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		e.put("r", 5, 0, time.Millisecond)
		fetched := make(chan struct{})
		e.client.after = func(n int) {
			if n == 1 {
				close(fetched)
			}
		}
		run := startReader(t, e.config(scan.TrimHorizon()))
		rdRecv(t, fetched, "the first GetRecords call") // the page is fetched; nobody receives it
		run.cancel()
		if err := run.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run = %v, want context.Canceled", err)
		}
		select {
		case p := <-run.out:
			t.Errorf("a page of %d records was sent after cancel", len(p.records))
		default:
		}
	})

	t.Run("in backoff", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		e.put("r", 5, 0, time.Millisecond)
		e.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}})
		e.clock.block = func(time.Duration) bool { return true } // every real wait blocks
		throttles := 0
		cfg := e.config(scan.TrimHorizon())
		cfg.hooks.onThrottle = func(string, string, int, time.Duration, error) { throttles++ }
		run := startReader(t, cfg)
		d := rdRecv(t, e.clock.blocked, "the throttle backoff")
		if want := readerDefaultThrottle.Ceiling(1) * 3 / 4; d != want {
			t.Errorf("blocked in a wait of %v, want the first throttle backoff %v", d, want)
		}
		run.cancel()
		if err := run.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run = %v, want context.Canceled", err)
		}
		if throttles != 1 {
			t.Errorf("throttles = %d, want 1", throttles)
		}
	})

	t.Run("idle at the tip", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		e := newRDEnv(t, kinesistest.WithoutLimits())
		cfg := e.config(scan.TrimHorizon())
		cfg.idleWait = 3 * time.Second
		e.clock.block = func(d time.Duration) bool { return d == cfg.idleWait }
		run := startReader(t, cfg)
		rdRecv(t, e.clock.blocked, "the idle wait")
		run.cancel()
		if err := run.wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run = %v, want context.Canceled", err)
		}
	})

	t.Run("already cancelled", func(t *testing.T) {
		e := newRDEnv(t, kinesistest.WithoutLimits())
		r, err := newReader(e.config(scan.TrimHorizon()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.run(ctx, make(chan page)); !errors.Is(err, context.Canceled) {
			t.Fatalf("run = %v, want context.Canceled", err)
		}
		if n := e.fake.Calls(kinesistest.OpGetShardIterator); n != 0 {
			t.Errorf("GetShardIterator calls = %d, want 0", n)
		}
	})
}

func TestNewReaderRefusesBadConfig(t *testing.T) {
	client := kinesistest.New()
	good := readerConfig{client: client, stream: rdStream, shard: rdShard, start: scan.TrimHorizon()}
	tests := []struct {
		name     string
		change   func(*readerConfig)
		says     string
		position bool // wraps scan.ErrInvalidPosition
	}{
		{"LATEST", func(c *readerConfig) { c.start = scan.Latest() }, "shard " + rdShard + ": start position LATEST must be resolved", true},
		{"SHARD_END", func(c *readerConfig) { c.start = scan.ShardEnd() }, "shard " + rdShard + ": start position SHARD_END", true},
		{"zero position", func(c *readerConfig) { c.start = scan.Position{} }, "shard " + rdShard + ": start position", true},
		{"bad sequence", func(c *readerConfig) { c.start = scan.AfterSequence("12x") }, "shard " + rdShard + ": start position", true},
		{"no client", func(c *readerConfig) { c.client = nil }, "shard " + rdShard + ": no Kinesis client", false},
		{"no stream", func(c *readerConfig) { c.stream = "" }, "shard " + rdShard + ": empty stream name", false},
		{"no shard", func(c *readerConfig) { c.shard = "" }, "stream " + rdStream + ": empty shard ID", false},
		{"limit too big", func(c *readerConfig) { c.limit = 10001 }, "GetRecords limit 10001", false},
		{"negative limit", func(c *readerConfig) { c.limit = -1 }, "GetRecords limit -1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			r, err := newReader(cfg)
			if err == nil {
				t.Fatalf("newReader accepted the config: %+v", r.cfg)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
			if got := errors.Is(err, scan.ErrInvalidPosition); got != tt.position {
				t.Errorf("errors.Is(err, scan.ErrInvalidPosition) = %v, want %v", got, tt.position)
			}
		})
	}
	if _, err := newReader(good); err != nil {
		t.Errorf("newReader(good) = %v", err)
	}
}
