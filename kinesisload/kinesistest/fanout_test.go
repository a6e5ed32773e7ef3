package kinesistest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

// register registers consumer "app" on the fixture's stream and returns
// its ARN.
func (x *fixture) register() string {
	x.t.Helper()
	out, err := x.f.RegisterStreamConsumer(context.Background(), &kinesis.RegisterStreamConsumerInput{
		StreamARN: aws.String(x.f.streamARN(x.stream)), ConsumerName: aws.String("app")})
	if err != nil {
		x.t.Fatal(err)
	}
	if out.Consumer.ConsumerStatus != types.ConsumerStatusCreating {
		x.t.Errorf("RegisterStreamConsumer answered %s, want CREATING", out.Consumer.ConsumerStatus)
	}
	return aws.ToString(out.Consumer.ConsumerARN)
}

func (x *fixture) subscribe(arn, shard string, pos types.StartingPosition) (kinesis.SubscribeToShardEventStreamReader, error) {
	es, err := x.f.SubscribeToShard(context.Background(), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(arn), ShardId: aws.String(shard), StartingPosition: &pos})
	if err == nil {
		x.t.Cleanup(func() { es.Close() })
	}
	return es, err
}

var trimHorizon = types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}

// next receives the next event, or reports the end of the stream (nil).
func next(t *testing.T, es kinesis.SubscribeToShardEventStreamReader) *types.SubscribeToShardEvent {
	t.Helper()
	select {
	case ev, ok := <-es.Events():
		if !ok {
			return nil
		}
		e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !isEvent {
			t.Fatalf("event of type %T", ev)
		}
		return &e.Value
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return nil
	}
}

func TestSubscribeLimits(t *testing.T) {
	x := newFixture(t, 1, WithConsumerActivation(3*time.Second)) // default limits
	arn := x.register()
	var got []string
	try := func() {
		es, err := x.subscribe(arn, shard0, trimHorizon)
		got = append(got, errorKind(err))
		if err == nil {
			es.Close()
		}
	}
	try() // CREATING
	x.clock.Advance(3 * time.Second)
	try()                                   // ACTIVE: subscribed
	x.clock.Advance(500 * time.Millisecond) // within the second
	try()
	x.clock.Advance(time.Second) // within 5 s of the success
	try()
	x.clock.Advance(5 * time.Second)
	try()
	want := []string{"ResourceInUse", "", "LimitExceeded", "ResourceInUse", ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("subscriptions (-want +got):\n%s", d)
	}
	st, _ := x.f.Stats(x.stream, shard0)
	if st.SubscribeCalls != 2 || st.SubscribeRefused != 2 {
		t.Errorf("stats: %d subscriptions, %d refused, want 2 and 2", st.SubscribeCalls, st.SubscribeRefused)
	}
	_, err := x.f.SubscribeToShard(context.Background(), &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(arn + "x"), ShardId: aws.String(shard0), StartingPosition: &trimHorizon})
	if k := errorKind(err); k != "ResourceNotFound" {
		t.Errorf("unknown consumer: %s, want ResourceNotFound", k)
	}
	_, err = x.f.RegisterStreamConsumer(context.Background(), &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(x.f.streamARN(x.stream)), ConsumerName: aws.String("app")})
	if k := errorKind(err); k != "ResourceInUse" {
		t.Errorf("registering a name twice: %s, want ResourceInUse", k)
	}
}

// Events carry the records with continuation numbers, heartbeats come
// every 5 s, resuming after a continuation number goes on where the
// events left off, and a subscription ends after 5 minutes.
func TestSubscriptionEvents(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	arn := x.register()
	s1 := x.put("0", "a")
	s2 := x.put("0", "b")
	es, err := x.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, es)
	if d := cmp.Diff([]string{"a", "b"}, data(ev.Records)); d != "" {
		t.Fatalf("first event (-want +got):\n%s", d)
	}
	if got := aws.ToString(ev.ContinuationSequenceNumber); got != s2 {
		t.Errorf("continuation %s, want the last record's %s", got, s2)
	}
	x.clock.Advance(HeartbeatInterval)
	hb := next(t, es)
	if len(hb.Records) != 0 || aws.ToString(hb.ContinuationSequenceNumber) != s2 || aws.ToInt64(hb.MillisBehindLatest) != 0 {
		t.Errorf("heartbeat: %d records, continuation %s, behind %d; want none, %s, 0", len(hb.Records), aws.ToString(hb.ContinuationSequenceNumber), aws.ToInt64(hb.MillisBehindLatest), s2)
	}
	x.put("0", "c")
	if ev := next(t, es); cmp.Diff([]string{"c"}, data(ev.Records)) != "" {
		t.Errorf("pushed %q, want c", data(ev.Records))
	}
	x.clock.Advance(SubscriptionTTL)
	if ev := next(t, es); ev != nil {
		t.Fatalf("an event after 5 minutes: %+v", ev)
	}
	if err := es.Err(); err != nil {
		t.Errorf("Err after the expiry = %v, want nil", err)
	}
	if st, _ := x.f.Stats(x.stream, shard0); st.SubscriptionsExpired != 1 {
		t.Errorf("%d expired, want 1", st.SubscriptionsExpired)
	}
	// Resume after the first event's continuation: b is not repeated.
	es2, err := x.subscribe(arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String(s2)})
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, es2); cmp.Diff([]string{"c"}, data(ev.Records)) != "" {
		t.Errorf("resumed with %q, want c", data(ev.Records))
	}
	_ = s1
	// A heartbeat's continuation of an empty shard resumes at its start.
	y := newFixture(t, 1, WithoutLimits())
	arn = y.register()
	es3, err := y.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	hb = next(t, es3)
	y.put("0", "z")
	es3.Close()
	y.clock.Advance(10 * time.Second)
	es4, err := y.subscribe(arn, shard0, types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: hb.ContinuationSequenceNumber})
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, es4); cmp.Diff([]string{"z"}, data(ev.Records)) != "" {
		t.Errorf("after an empty shard's continuation: %q, want z", data(ev.Records))
	}
}

// A consumer reads 2 MiB per second per shard, its own: polling readers
// and other consumers do not take from it.
func TestSubscriptionReadLimit(t *testing.T) {
	x := newFixture(t, 1, WithLimits(Limits{SubscriptionBytesPerSecond: 2 << 20}))
	big := bytes.Repeat([]byte("x"), 1<<20-10)
	for range 4 {
		if _, err := x.f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(x.stream), PartitionKey: aws.String("k"), Data: big}); err != nil {
			t.Fatal(err)
		}
	}
	arn := x.register()
	es, err := x.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(next(t, es).Records); n != 2 {
		t.Fatalf("first event: %d records, want 2 (2 MiB)", n)
	}
	select {
	case <-es.Events():
		t.Fatal("an event before the budget refilled")
	case <-time.After(50 * time.Millisecond):
	}
	x.clock.Advance(time.Second)
	if n := len(next(t, es).Records); n != 2 {
		t.Errorf("second event: %d records, want 2", n)
	}
}

// At the end of a closed shard the last event has no continuation and
// lists the children; then the stream ends.
func TestSubscriptionChildShards(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	arn := x.register()
	x.put("0", "a")
	if _, err := x.f.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String(x.stream), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("1000")}); err != nil {
		t.Fatal(err)
	}
	es, err := x.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, es)
	if d := cmp.Diff([]string{"a"}, data(ev.Records)); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
	if ev.ContinuationSequenceNumber != nil || len(ev.ChildShards) != 2 {
		t.Errorf("end event: continuation %v, %d children; want nil and 2", aws.ToString(ev.ContinuationSequenceNumber), len(ev.ChildShards))
	}
	if ev := next(t, es); ev != nil || es.Err() != nil {
		t.Errorf("after the end: %+v, Err %v; want the stream closed without error", ev, es.Err())
	}
}

// A fault ends a stream with its error; a deregistered consumer's
// subscription ends with ResourceNotFound.
func TestSubscriptionEndsWithError(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	arn := x.register()
	x.f.Inject(Fault{Op: OpSubscribeToShardEvent, Nth: 2, Err: &types.InternalFailureException{Message: aws.String("boom")}})
	es, err := x.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	next(t, es) // the first heartbeat
	x.put("0", "a")
	if ev := next(t, es); ev != nil {
		t.Fatalf("an event despite the fault: %+v", ev)
	}
	if k := errorKind(es.Err()); k != "other: InternalFailureException: boom" {
		t.Errorf("Err = %v, want the fault's", es.Err())
	}
	x.clock.Advance(10 * time.Second)
	es2, err := x.subscribe(arn, shard0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	next(t, es2)
	if _, err := x.f.DeregisterStreamConsumer(context.Background(), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	for ev := next(t, es2); ev != nil; ev = next(t, es2) {
	}
	if k := errorKind(es2.Err()); k != "ResourceNotFound" {
		t.Errorf("Err after deregistering = %v, want ResourceNotFound", es2.Err())
	}
}
