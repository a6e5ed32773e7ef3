package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// testReadMode is the read mode that start gives a Config that names none:
// the guarantee tests set it to run in fan-out mode too (the package's
// tests do not run in parallel).
var testReadMode = ReadPolling

// testConsumer is the consumer name of the tests in fan-out mode.
const testConsumer = "tidemark-test"

// fanOutReaders counts the fan-out readers the tests made.
var fanOutReaders atomic.Int64

// fastFanOut paces subscriptions as fast as a fake without limits allows.
var fastFanOut = optionFunc(func(o *options) {
	o.tuneFanOut = func(fc *fanoutConfig) {
		fanOutReaders.Add(1)
		fc.subscribeInterval = time.Millisecond
		fc.resubscribeWait = time.Millisecond
	}
})

// withTestReadMode applies testReadMode to a Config that names no mode.
func withTestReadMode(cfg Config, opts []Option) (Config, []Option) {
	if testReadMode == ReadFanOut && cfg.ReadMode == ReadPolling && cfg.ConsumerName == "" {
		cfg.ReadMode, cfg.ConsumerName = ReadFanOut, testConsumer
	}
	if cfg.ReadMode == ReadFanOut {
		opts = append([]Option{fastFanOut}, opts...)
	}
	return cfg, opts
}

// inMode runs fn with testReadMode set to m.
func inMode(t *testing.T, m ReadMode, fn func(*testing.T)) {
	t.Helper()
	old := testReadMode
	testReadMode = m
	t.Cleanup(func() { testReadMode = old })
	before := fanOutReaders.Load()
	fn(t)
	if m == ReadFanOut && fanOutReaders.Load() == before && !t.Failed() {
		t.Error("no shard was read in fan-out mode")
	}
}

// guaranteeTests are the tests of the guarantee that run in both read
// modes: under their own names in polling mode, and in TestFanOutGuarantees
// in fan-out mode.
var guaranteeTests = []struct {
	name string
	fn   func(*testing.T)
}{
	{"LatestSurvivesAbortBeforeFirstCommit", TestLatestSurvivesAbortBeforeFirstCommit},
	{"NoLoopWhileScanPendingAcrossSplit", TestNoLoopWhileScanPendingAcrossSplit},
	{"NoLoopUntilBatchIsDurable", TestNoLoopUntilBatchIsDurable},
	{"MergeChildWaitsForBothParents", TestMergeChildWaitsForBothParents},
	{"CrashAtEveryJournalWrite", TestCrashAtEveryJournalWrite},
	{"TransactionalSinkCheckpointsWithoutJournal", TestTransactionalSinkCheckpointsWithoutJournal},
	{"CloseFinishesInFlightBatch", TestCloseFinishesInFlightBatch},
	{"CloseTimeoutCancelsDelivery", TestCloseTimeoutCancelsDelivery},
	{"PauseResumeDuringConsumption", TestPauseResumeDuringConsumption},
	{"LoaderDeaggregates", TestLoaderDeaggregates},
	{"FollowedChildOfSelectedParentStartsAtTrimHorizon", TestFollowedChildOfSelectedParentStartsAtTrimHorizon},
	{"PauseRacingCompletionIsNotAnError", TestPauseRacingCompletionIsNotAnError},
	{"WidenedSelectionOutOfOrderOptIn", TestWidenedSelectionOutOfOrderOptIn},
	{"HooksReportEveryEvent", TestHooksReportEveryEvent},
	{"StartOverWaitsForADeletedStream", TestStartOverWaitsForADeletedStream},
}

// TestFanOutGuarantees runs the guarantee tests in fan-out mode.
func TestFanOutGuarantees(t *testing.T) {
	for _, m := range []ReadMode{ReadFanOut} {
		for _, g := range guaranteeTests {
			t.Run(m.String()+"/"+g.name, func(t *testing.T) { inMode(t, m, g.fn) })
		}
	}
}

// waitClock is a backoff.Clock over the fake's manual clock whose Sleep
// waits until the test has moved the clock far enough (or ctx ends).
type waitClock struct{ mc *kinesistest.ManualClock }

func (c waitClock) Now() time.Time { return c.mc.Now() }

func (c waitClock) Sleep(ctx context.Context, d time.Duration) error {
	target := c.mc.Now().Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !c.mc.Now().Before(target) {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
}

// fanOutStats returns the fake's counters of shard0.
func (s *stream) stats(shard string) kinesistest.ShardStats {
	s.t.Helper()
	st, err := s.f.Stats(s.name, shard)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// waitUntil polls cond until it holds, failing after 20 s (after calling
// explain, if given).
func waitUntil(t *testing.T, what string, cond func() bool, explain ...func()) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range explain {
				f()
			}
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fanOutConfig is a fan-out Config reading from TRIM_HORIZON, with fast
// retries.
func fanOutConfig(s *stream, sink Sink) Config {
	return Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), ReadMode: ReadFanOut, ConsumerName: testConsumer,
		KinesisBackoff: time.Millisecond, KinesisMaxBackoff: 10 * time.Millisecond}
}

// realPacing restores the default subscription pacing and renewal.
var realPacing = optionFunc(func(o *options) {
	o.tuneFanOut = func(fc *fanoutConfig) {
		fanOutReaders.Add(1)
		fc.renewal, fc.subscribeInterval, fc.resubscribeWait = 0, 0, 0
	}
})

// A subscription is renewed before Kinesis ends it at 5 minutes, after the
// last record, on a modelled clock: nothing lost, nothing repeated, and
// the fake never had to expire it.
func TestFanOutRenewsBeforeFiveMinutes(t *testing.T) {
	mc := kinesistest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limits := kinesistest.Limits{SubscribeToShardPerSecond: 1, ResubscribeWindow: 5 * time.Second}
	s := newFakeStream(t, 1, kinesistest.WithClock(mc), kinesistest.WithLimits(limits))
	rec := newRecorder()
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		realPacing, withTune(func(rc *readerConfig) { rc.clock = waitClock{mc} }))
	s.put(shard0, "r1")
	rec.waitFor(t, "r1")
	mc.Advance(4 * time.Minute)
	s.put(shard0, "r2")
	rec.waitFor(t, "r2")
	if got := s.stats(shard0).SubscribeCalls; got != 1 {
		t.Fatalf("%d subscriptions after 4 minutes, want 1", got)
	}
	mc.Advance(40 * time.Second) // past the renewal at 4m30s, before 5 minutes
	waitUntil(t, "the subscription is renewed", func() bool { return s.stats(shard0).SubscribeCalls == 2 })
	s.put(shard0, "r3")
	rec.waitFor(t, "r3")
	mc.Advance(time.Minute) // the first subscription's 5 minutes are over
	s.put(shard0, "r4")
	rec.waitFor(t, "r4")
	r.stop(t)
	st := s.stats(shard0)
	if st.SubscriptionsExpired != 0 || st.SubscribeRefused != 0 {
		t.Errorf("%d subscriptions expired and %d refused, want none: the Loader renews before 5 minutes and paces its calls", st.SubscriptionsExpired, st.SubscribeRefused)
	}
	if diff := cmp.Diff([]string{"r1", "r2", "r3", "r4"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// A Sink slower than the subscription's 5 minutes: Kinesis ends the
// subscription while the Loader holds its events, and the next one starts
// after the last record handed on.
func TestFanOutSubscriptionExpiresDuringSlowSink(t *testing.T) {
	mc := kinesistest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(mc))
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		if string(b.Records[0].Data) == "r1" {
			select {
			case entered <- struct{}{}:
				<-release
			default:
			}
		}
		return nil
	}
	cfg := fanOutConfig(s, rec)
	cfg.SinkRetries = SinkRetriesForever
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		withTune(func(rc *readerConfig) { rc.clock = waitClock{mc} }))
	s.put(shard0, "r1")
	<-entered
	for _, d := range []string{"r2", "r3", "r4"} {
		s.put(shard0, d)
	}
	mc.Advance(6 * time.Minute)
	waitUntil(t, "the subscription expires", func() bool { return s.stats(shard0).SubscriptionsExpired > 0 })
	close(release)
	s.put(shard0, "r5")
	rec.waitFor(t, "r1", "r2", "r3", "r4", "r5")
	r.stop(t)
	if diff := cmp.Diff([]string{"r1", "r2", "r3", "r4", "r5"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if got := s.stats(shard0).SubscribeCalls; got < 2 {
		t.Errorf("%d subscriptions, want a new one after the expiry", got)
	}
}

// Throttled and refused subscriptions, and a stream that ends with a
// transient error, are retried; nothing is lost or repeated. A refusal no
// retry fixes stops Run naming the shard and SubscribeToShard.
func TestFanOutSubscribeFailures(t *testing.T) {
	transient := []struct {
		name  string
		fault kinesistest.Fault
	}{
		{"throttled", kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: 1, Err: &types.LimitExceededException{Message: aws.String("Rate exceeded")}}},
		{"in use", kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: 1, Err: &types.ResourceInUseException{Message: aws.String("in use")}}},
		{"internal failure", kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: 1, Err: &types.InternalFailureException{Message: aws.String("oops")}}},
		{"stream ends with an error", kinesistest.Fault{Op: kinesistest.OpSubscribeToShardEvent, Nth: 2, Err: &types.InternalFailureException{Message: aws.String("oops")}}},
		// The connection ends under the subscription, as Go's HTTP/2
		// client reports a server's GOAWAY (no error code of the
		// service, not a net.Error): Run stopped on it. Found by a
		// review.
		{"connection drained (GOAWAY)", kinesistest.Fault{Op: kinesistest.OpSubscribeToShardEvent, Nth: 2,
			Err: fmt.Errorf("decode event: %w", errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=""`))}},
	}
	for _, tt := range transient {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			s.put(shard0, "a")
			s.put(shard0, "b")
			s.f.Inject(tt.fault)
			rec := newRecorder()
			retries := &subscribeRetries{}
			r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(retries))
			rec.waitFor(t, "a", "b")
			s.put(shard0, "c")
			rec.waitFor(t, "c")
			if err := r.stop(t); !errors.Is(err, ErrClosed) {
				t.Fatalf("Run = %v", err)
			}
			if diff := cmp.Diff([]string{"a", "b", "c"}, rec.delivered()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			if got := retries.ops(); !slices.Contains(got, "SubscribeToShard") {
				t.Errorf("retried ops %q, want SubscribeToShard", got)
			}
		})
	}
	fatal := []struct {
		name  string
		fault kinesistest.Fault
	}{
		{"access denied", kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Err: &types.AccessDeniedException{Message: aws.String("no")}}},
		{"stream ends: access denied", kinesistest.Fault{Op: kinesistest.OpSubscribeToShardEvent, Err: &types.AccessDeniedException{Message: aws.String("no")}}},
	}
	for _, tt := range fatal {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			s.put(shard0, "a")
			s.f.Inject(tt.fault)
			r := start(t, context.Background(), fanOutConfig(s, newRecorder()), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
			err := r.wait(t)
			var re *RunError
			if !errors.As(err, &re) || re.Op != "SubscribeToShard" || re.Shard != shard0 || !errors.Is(err, ErrKinesis) {
				t.Fatalf("Run = %v, want a *RunError of ErrKinesis naming %s and SubscribeToShard", err, shard0)
			}
			if _, ok := errors.AsType[*types.AccessDeniedException](err); !ok {
				t.Errorf("Run = %v, want it to wrap the AccessDeniedException", err)
			}
		})
	}
}

// A subscription that ends with ResourceNotFound every time (the consumer
// or the stream gone, though SubscribeToShard succeeds) counts towards
// KinesisMaxAttempts: it was retried at once and without limit, and Run
// never stopped. Found by a review.
func TestFanOutSubscriptionsEndingNotFoundAreBoundedByMaxAttempts(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpSubscribeToShardEvent, Shard: shard0,
		Err: &types.ResourceNotFoundException{Message: aws.String("injected")}})
	cfg := fanOutConfig(s, newRecorder())
	cfg.KinesisMaxAttempts = 3
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	var re *RunError
	if !errors.As(err, &re) || re.Op != "SubscribeToShard" || re.Shard != shard0 {
		t.Fatalf("Run = %v, want a *RunError naming %s and SubscribeToShard", err, shard0)
	}
}

// subscribeRetries is a hook that records the operations retried.
type subscribeRetries struct {
	mu  sync.Mutex
	got []string
}

func (h *subscribeRetries) OnRetry(e Retry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, e.Op)
}

func (h *subscribeRetries) ops() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// unknownEvents is a Subscriber that sends an event of a type the SDK does
// not know before every event of the fake's.
type unknownEvents struct{ *kinesistest.Fake }

func (u unknownEvents) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	es, err := u.Fake.SubscribeToShard(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	w := &unknownReader{SubscribeToShardEventStreamReader: es, ch: make(chan types.SubscribeToShardEventStream), done: make(chan struct{})}
	go w.pipe(ctx)
	return w, nil
}

type unknownReader struct {
	kinesis.SubscribeToShardEventStreamReader
	ch   chan types.SubscribeToShardEventStream
	done chan struct{}
}

func (w *unknownReader) Events() <-chan types.SubscribeToShardEventStream { return w.ch }

func (w *unknownReader) Close() error {
	err := w.SubscribeToShardEventStreamReader.Close()
	<-w.done
	return err
}

func (w *unknownReader) pipe(ctx context.Context) {
	defer close(w.done)
	defer close(w.ch)
	for ev := range w.SubscribeToShardEventStreamReader.Events() {
		for _, e := range []types.SubscribeToShardEventStream{&types.UnknownUnionMember{Tag: "FutureEvent", Value: []byte("{}")}, ev} {
			select {
			case w.ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Events of a type the Loader does not know are skipped, not a failure.
func TestFanOutIgnoresUnknownEvents(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	rec := newRecorder()
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(unknownEvents{s.f}), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, "a")
	s.put(shard0, "b")
	rec.waitFor(t, "b")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// A slow Sink slows the subscription down: while the Sink holds a batch,
// the Loader takes no more than one further event (and the fake makes one
// more, which waits to be taken), however many records arrive.
func TestFanOutBackpressure(t *testing.T) {
	s := newFakeStream(t, 1)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		if string(b.Records[0].Data) == "first" {
			select {
			case entered <- struct{}{}:
				<-release
			default:
			}
		}
		return nil
	}
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	s.put(shard0, "first")
	<-entered
	before := s.stats(shard0).EventsSent
	want := []string{"first"}
	for i := range 50 {
		d := fmt.Sprintf("r%d", i)
		want = append(want, d)
		s.put(shard0, d)
		time.Sleep(2 * time.Millisecond)
	}
	if got := s.stats(shard0).EventsSent - before; got > 2 {
		t.Errorf("%d events made while the Sink held its batch, want at most 2 (one taken by the Loader, one waiting)", got)
	}
	close(release)
	rec.waitFor(t, want...)
	r.stop(t)
	if diff := cmp.Diff(want, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// The consumer is registered once and reused by the next run; a consumer
// still CREATING is waited for.
func TestFanOutRegistersAndReusesTheConsumer(t *testing.T) {
	s := newFakeStream(t, 1, kinesistest.WithConsumerActivation(1500*time.Millisecond))
	s.put(shard0, "a")
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(s.f), WithStore(store))
	rec.waitFor(t, "a")
	r.stop(t)
	if got := s.f.Calls(kinesistest.OpRegisterStreamConsumer); got != 1 {
		t.Fatalf("RegisterStreamConsumer called %d times, want 1", got)
	}
	s.put(shard0, "b")
	rec2 := newRecorder()
	r = start(t, context.Background(), fanOutConfig(s, rec2), WithClient(s.f), WithStore(store))
	rec2.waitFor(t, "b")
	r.stop(t)
	if got := s.f.Calls(kinesistest.OpRegisterStreamConsumer); got != 1 {
		t.Errorf("RegisterStreamConsumer called %d times in two runs, want 1: the consumer is reused", got)
	}
	if diff := cmp.Diff([]string{"b"}, rec2.delivered()); diff != "" {
		t.Errorf("second run delivered (-want +got):\n%s", diff)
	}
	arn := fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", kinesistest.DefaultRegion, kinesistest.DefaultAccountID, s.name)
	if err := DeregisterConsumer(context.Background(), s.f, arn, testConsumer); err != nil {
		t.Fatal(err)
	}
	if err := DeregisterConsumer(context.Background(), s.f, arn, testConsumer); err != nil {
		t.Errorf("deregistering a consumer that is gone: %v, want nil", err)
	}
}

func TestFanOutConfigValidation(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   func(*Config)
		field string
	}{
		{"fan-out without a name", func(c *Config) { c.ReadMode = ReadFanOut }, "ConsumerName"},
		{"bad name", func(c *Config) { c.ReadMode, c.ConsumerName = ReadFanOut, "a b" }, "ConsumerName"},
		{"name with polling", func(c *Config) { c.ConsumerName = "x" }, "ConsumerName"},
		{"unknown mode", func(c *Config) { c.ReadMode = 7 }, "ReadMode"},
	} {
		cfg := Config{Stream: "s", Sink: newRecorder()}
		tt.cfg(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig naming %s", tt.name, err, tt.field)
		}
	}
	ok := Config{Stream: "s", Sink: newRecorder(), ReadMode: ReadFanOut, ConsumerName: "app-1.x_y"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
}

// A fan-out consumer deregistered by hand while the Loader reads is looked
// up again and registered anew: the shard reads on, and Run does not stop
// with ResourceNotFoundException.
func TestFanOutConsumerDeregisteredWhileReadingIsRegisteredAgain(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	rec := newRecorder()
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)))
	rec.waitFor(t, "a")
	arn := fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", kinesistest.DefaultRegion, kinesistest.DefaultAccountID, s.name)
	if err := DeregisterConsumer(context.Background(), s.f, arn, testConsumer); err != nil {
		t.Fatal(err)
	}
	s.put(shard0, "b")
	rec.waitFor(t, "b")
	r.stop(t)
	if got := s.f.Calls(kinesistest.OpRegisterStreamConsumer); got != 2 {
		t.Errorf("RegisterStreamConsumer called %d times, want 2 (once more after the consumer was deregistered)", got)
	}
}

// A fan-out reader told its consumer is gone (a stream deleted and
// re-created under the name: the consumer went with the old stream) does
// not register a consumer on the new stream, whose ARN is the same, and
// read it from the old stream's positions: the session learns the stream
// is another (a *StreamMismatchError: the Run starts over or stops).
// (Found by the simulation: the new stream's records were delivered by
// the old session, then again after the start-over.)
func TestFanOutConsumerGoneWithItsStreamIsAMismatch(t *testing.T) {
	s := newFakeStream(t, 1)
	ctx := context.Background()
	l, err := New(fanOutConfig(s, newRecorder()), WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	if err != nil {
		t.Fatal(err)
	}
	se := &session{l: l, client: s.f, fanout: fanoutSession{lock: make(chan struct{}, 1)}}
	if se.identity, err = describeStream(ctx, s.f, s.name, time.Second); err != nil {
		t.Fatal(err)
	}
	_, arn, err := se.consumerARN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(s.name), EnforceConsumerDeletion: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(s.name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	got, err := se.consumerGone(ctx, arn)
	if mismatch, ok := errors.AsType[*StreamMismatchError](err); !ok {
		t.Fatalf("consumerGone after a re-creation = %q, %v; want a *StreamMismatchError", got, err)
	} else if !mismatch.Stored.Equal(se.identity) {
		t.Errorf("the mismatch names %v as the stored stream, want %v", mismatch.Stored, se.identity)
	}
	if n := s.f.Calls(kinesistest.OpRegisterStreamConsumer); n != 1 {
		t.Errorf("RegisterStreamConsumer called %d times, want once (not on the new stream)", n)
	}
}
