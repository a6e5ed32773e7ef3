package kinesistest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCreateStreamSplitsHashKeySpaceEvenly(t *testing.T) {
	x := newFixture(t, 3)
	got := x.listShards(nil)
	type rng struct{ ID, Lo, Hi string }
	var ranges []rng
	for _, s := range got {
		ranges = append(ranges, rng{*s.ShardId, *s.HashKeyRange.StartingHashKey, *s.HashKeyRange.EndingHashKey})
		if s.ParentShardId != nil || s.AdjacentParentShardId != nil || s.SequenceNumberRange.EndingSequenceNumber != nil {
			t.Errorf("new shard %s has lineage or an end: %+v", *s.ShardId, s)
		}
	}
	// The ranges real Kinesis gives a 3-shard stream.
	want := []rng{
		{shard0, "0", "113427455640312821154458202477256070484"},
		{shard1, "113427455640312821154458202477256070485", "226854911280625642308916404954512140969"},
		{shard2, "226854911280625642308916404954512140970", "340282366920938463463374607431768211455"},
	}
	if d := cmp.Diff(want, ranges); d != "" {
		t.Errorf("shard ranges (-want +got):\n%s", d)
	}
}

func TestDescribeStreamSummary(t *testing.T) {
	x := newFixture(t, 2, WithRetention(48*time.Hour), WithRegion("eu-west-1"), WithAccountID("123456789012"))
	out, err := x.f.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil {
		t.Fatal(err)
	}
	want := &types.StreamDescriptionSummary{
		StreamName:              aws.String("s"),
		StreamARN:               aws.String("arn:aws:kinesis:eu-west-1:123456789012:stream/s"),
		StreamStatus:            types.StreamStatusActive,
		StreamCreationTimestamp: aws.Time(t0),
		OpenShardCount:          aws.Int32(2),
		RetentionPeriodHours:    aws.Int32(48),
		EncryptionType:          types.EncryptionTypeNone,
		EnhancedMonitoring:      []types.EnhancedMetrics{{ShardLevelMetrics: []types.MetricsName{}}},
		ConsumerCount:           aws.Int32(0),
		StreamModeDetails:       &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
	}
	if d := cmp.Diff(want, out.StreamDescriptionSummary, cmpopts.IgnoreUnexported(types.StreamDescriptionSummary{}, types.EnhancedMetrics{}, types.StreamModeDetails{})); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
	// The ARN addresses the same stream.
	byARN, err := x.f.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamARN: want.StreamARN})
	if err != nil || *byARN.StreamDescriptionSummary.StreamName != "s" {
		t.Errorf("describe by ARN: %v, %v", byARN, err)
	}
}

func TestStreamErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		call func(f *Fake) error
		want string
	}{
		{"create existing", func(f *Fake) error {
			_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("s"), ShardCount: aws.Int32(1)})
			return err
		}, "ResourceInUse"},
		{"create over shard limit", func(f *Fake) error {
			_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("t"), ShardCount: aws.Int32(3)})
			return err
		}, "LimitExceeded"},
		{"create zero shards", func(f *Fake) error {
			_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("t"), ShardCount: aws.Int32(0)})
			return err
		}, "InvalidArgument"},
		{"create bad name", func(f *Fake) error {
			_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("a/b"), ShardCount: aws.Int32(1)})
			return err
		}, "InvalidArgument"},
		{"describe missing", func(f *Fake) error {
			_, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("nope")})
			return err
		}, "ResourceNotFound"},
		{"describe without name", func(f *Fake) error {
			_, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{})
			return err
		}, "InvalidArgument"},
		{"name and ARN disagree", func(f *Fake) error {
			_, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s"), StreamARN: aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/t")})
			return err
		}, "InvalidArgument"},
		{"delete missing", func(f *Fake) error {
			_, err := f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("nope")})
			return err
		}, "ResourceNotFound"},
		{"put to missing stream", func(f *Fake) error {
			_, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("nope"), PartitionKey: aws.String("k"), Data: []byte("x")})
			return err
		}, "ResourceNotFound"},
		{"list missing stream", func(f *Fake) error {
			_, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("nope")})
			return err
		}, "ResourceNotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New(WithShardLimit(4))
			NewStream(t, f, "s", 2)
			if got := errorKind(tc.call(f)); got != tc.want {
				t.Errorf("error = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDeleteStream(t *testing.T) {
	ctx := context.Background()
	x := newFixture(t, 1)
	x.put("0", "a")
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	if _, err := x.f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("s")}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")}); errorKind(err) != "ResourceNotFound" {
		t.Errorf("describe after delete: %v, want ResourceNotFound", err)
	}
	// A new stream of the same name is a different stream: old iterators
	// do not read it.
	NewStream(t, x.f, "s", 1)
	x.put("0", "b")
	if _, err := x.getErr(it, 0); errorKind(err) != "ResourceNotFound" {
		t.Errorf("old iterator on recreated stream: %v, want ResourceNotFound", err)
	}
	got := data(x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records)
	if d := cmp.Diff([]string{"b"}, got); d != "" {
		t.Errorf("recreated stream holds (-want +got):\n%s", d)
	}
}

func TestCancelledContextFailsEveryCall(t *testing.T) {
	f := New()
	NewStream(t, f, "s", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	name := aws.String("s")
	calls := map[Op]func() error{
		OpCreateStream: func() error {
			_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("t"), ShardCount: aws.Int32(1)})
			return err
		},
		OpDeleteStream: func() error { _, err := f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: name}); return err },
		OpDescribeStreamSummary: func() error {
			_, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: name})
			return err
		},
		OpListShards: func() error { _, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: name}); return err },
		OpGetShardIterator: func() error {
			_, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: name, ShardId: aws.String(shard0), ShardIteratorType: types.ShardIteratorTypeLatest})
			return err
		},
		OpGetRecords: func() error {
			_, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("x")})
			return err
		},
		OpPutRecord: func() error {
			_, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: name, PartitionKey: name, Data: []byte("x")})
			return err
		},
		OpPutRecords: func() error {
			_, err := f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: name, Records: []types.PutRecordsRequestEntry{{PartitionKey: name, Data: []byte("x")}}})
			return err
		},
		OpSplitShard: func() error {
			_, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: name, ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String("100")})
			return err
		},
		OpMergeShards: func() error {
			_, err := f.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: name, ShardToMerge: aws.String(shard0), AdjacentShardToMerge: aws.String(shard1)})
			return err
		},
	}
	for op, call := range calls {
		before := f.Calls(op)
		if got := errorKind(call()); got != "Canceled" {
			t.Errorf("%s with a cancelled context: %s, want Canceled", op, got)
		}
		if n := f.Calls(op); n != before {
			t.Errorf("%s counted %d calls with a cancelled context", op, n-before)
		}
	}
	// Nothing changed.
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: name})
	if err != nil || len(out.Shards) != 1 {
		t.Errorf("stream changed by cancelled calls: %v, %v", out, err)
	}
}

// A stream deleted and created again under the same name, at the same
// instant on a clock that does not move, is still another stream: a later
// creation timestamp, shard IDs from shardId-000000000000, and the old
// stream's sequence numbers refused on the new shards.
func TestRecreatedStreamIsAnotherStream(t *testing.T) {
	x := newFixture(t, 1)
	ctx := context.Background()
	describe := func() *types.StreamDescriptionSummary {
		t.Helper()
		out, err := x.f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
		if err != nil {
			t.Fatal(err)
		}
		return out.StreamDescriptionSummary
	}
	before := describe()
	oldSeq := x.put("0", "old")
	if _, err := x.f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("s")}); err != nil {
		t.Fatal(err)
	}
	NewStream(t, x.f, "s", 1)
	after := describe()
	if *after.StreamARN != *before.StreamARN {
		t.Errorf("ARN of the re-created stream = %s, want %s (Kinesis builds it from the name)", *after.StreamARN, *before.StreamARN)
	}
	if want := before.StreamCreationTimestamp.Add(time.Millisecond); !after.StreamCreationTimestamp.Equal(want) {
		t.Errorf("creation timestamp of the re-created stream = %v, want %v (1 ms after the first, as the clock did not move)", *after.StreamCreationTimestamp, want)
	}
	if got := x.listShards(nil); len(got) != 1 || *got[0].ShardId != shard0 {
		t.Errorf("shards of the re-created stream = %v, want [%s]", got, shard0)
	}
	newSeq := x.put("0", "new")
	if len(newSeq) != len(oldSeq) || newSeq <= oldSeq { // 56 digits each: text order is number order
		t.Errorf("the re-created stream's first sequence number %s is not above the old stream's %s", newSeq, oldSeq)
	}
	for _, typ := range []types.ShardIteratorType{types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber} {
		_, err := x.iterErr(shard0, typ, oldSeq, nil)
		var ia *types.InvalidArgumentException
		if !errors.As(err, &ia) || !strings.Contains(err.Error(), "did not come from this stream") {
			t.Errorf("GetShardIterator %s of the old stream's number = %v, want InvalidArgumentException: ... did not come from this stream", typ, err)
		}
	}
	if _, err := x.iterErr(shard0, types.ShardIteratorTypeAtSequenceNumber, newSeq, nil); err != nil {
		t.Errorf("GetShardIterator AT_SEQUENCE_NUMBER of the new stream's number: %v", err)
	}
}
