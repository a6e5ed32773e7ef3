package kinesistest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// Enhanced fan-out cases of the conformance suite (see conformance_test.go).
// kinesalite has no fan-out; kinesis-local runs through the emulator
// harness's client, which supplies the initial-response event it omits.

// subscriber returns the target's fan-out calls, or skips the case.
func (e *env) subscriber(t *testing.T) kinesisload.Subscriber {
	t.Helper()
	e.skipFor(t, quirkNoFanOut)
	switch api := e.api.(type) {
	case *kinesistest.Fake:
		return api
	case *kinesis.Client:
		return kinesisload.NewSubscriber(api)
	}
	t.Fatalf("no Subscriber for %T", e.api)
	return nil
}

// nextEvent receives a subscription's next event with records, skipping
// empty ones (heartbeats), or nil when the stream ends.
func nextEvent(t *testing.T, es kinesis.SubscribeToShardEventStreamReader, wantRecords bool) *types.SubscribeToShardEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-es.Events():
			if !ok {
				return nil
			}
			e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
			if !isEvent || (wantRecords && len(e.Value.Records) == 0) {
				continue
			}
			return &e.Value
		case <-timeout:
			t.Fatal("no event within 30 s")
			return nil
		}
	}
}

// testFanOutReadsInOrder: a registered consumer becomes ACTIVE; a
// subscription from TRIM_HORIZON pushes the records in order, with the
// last one's sequence number as continuation; one started after that
// continuation pushes only what came later.
func testFanOutReadsInOrder(t *testing.T, e *env) {
	sub := e.subscriber(t)
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	d, err := e.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	arn, err := kinesisload.RegisterConsumer(ctx, sub, aws.ToString(d.StreamDescriptionSummary.StreamARN), "conformance")
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, r := range e.putMany(t, ctx, stream, names("r", 3)...) {
		last = aws.ToString(r.SequenceNumber)
	}
	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	es, err := sub.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(arn), ShardId: aws.String(shard),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}})
	if err != nil {
		t.Fatal(err)
	}
	var got []types.Record
	var cont string
	for len(got) < 3 {
		ev := nextEvent(t, es, true)
		if ev == nil {
			t.Fatalf("the subscription ended (%v) after %d records", es.Err(), len(got))
		}
		got = append(got, ev.Records...)
		cont = aws.ToString(ev.ContinuationSequenceNumber)
	}
	es.Close()
	if diff := cmp.Diff(names("r", 3), data(got)); diff != "" {
		t.Errorf("pushed from TRIM_HORIZON (-want +got):\n%s", diff)
	}
	if cont != last {
		t.Errorf("continuation %s, want the last record's %s", cont, last)
	}
	e.put(t, ctx, stream, "later", nil)
	// Kinesis refuses a subscription within 5 s of the last one with
	// ResourceInUseException; kinesis-local answers the call and then ends
	// the stream with it (and holds a closed subscription for a while).
	var ev *types.SubscribeToShardEvent
	for try := 0; ev == nil; try++ {
		if try == 30 {
			t.Fatal("no subscription after the continuation within 30 tries")
		}
		es2, err := sub.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{ConsumerARN: aws.String(arn), ShardId: aws.String(shard),
			StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String(cont)}})
		if err == nil {
			ev = nextEvent(t, es2, true)
			err = es2.Err()
			es2.Close()
		}
		if _, inUse := errors.AsType[*types.ResourceInUseException](err); inUse {
			time.Sleep(time.Second)
			continue
		}
		if ev == nil {
			t.Fatalf("subscribing after the continuation: %v", err)
		}
	}
	if diff := cmp.Diff([]string{"later"}, data(ev.Records)); diff != "" {
		t.Errorf("pushed after the continuation (-want +got):\n%s", diff)
	}
}
