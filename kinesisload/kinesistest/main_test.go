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
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	shard0 = "shardId-000000000000"
	shard1 = "shardId-000000000001"
	shard2 = "shardId-000000000002"
	shard3 = "shardId-000000000003"
	shard4 = "shardId-000000000004"
)

// fixture is a fake on a manual clock with one stream.
type fixture struct {
	t      *testing.T
	f      *Fake
	clock  *ManualClock
	stream string
}

func newFixture(t *testing.T, shards int, opts ...Option) *fixture {
	t.Helper()
	clk := NewManualClock(t0)
	f := New(append([]Option{WithClock(clk)}, opts...)...)
	NewStream(t, f, "s", shards)
	return &fixture{t: t, f: f, clock: clk, stream: "s"}
}

// put writes data with an explicit hash key that lands in the lowest shard
// of the stream unless key says otherwise; it returns the sequence number.
func (x *fixture) put(hashKey, data string) string {
	x.t.Helper()
	out, err := x.f.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String(x.stream), PartitionKey: aws.String("pk"), ExplicitHashKey: aws.String(hashKey), Data: []byte(data),
	})
	if err != nil {
		x.t.Fatalf("put %q: %v", data, err)
	}
	return *out.SequenceNumber
}

func (x *fixture) iter(shard string, typ types.ShardIteratorType, seq string, ts *time.Time) string {
	x.t.Helper()
	it, err := x.iterErr(shard, typ, seq, ts)
	if err != nil {
		x.t.Fatalf("GetShardIterator %s %s: %v", shard, typ, err)
	}
	return it
}

func (x *fixture) iterErr(shard string, typ types.ShardIteratorType, seq string, ts *time.Time) (string, error) {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(x.stream), ShardId: aws.String(shard), ShardIteratorType: typ, Timestamp: ts}
	if seq != "" {
		in.StartingSequenceNumber = aws.String(seq)
	}
	out, err := x.f.GetShardIterator(context.Background(), in)
	if err != nil {
		return "", err
	}
	return *out.ShardIterator, nil
}

func (x *fixture) get(it string, limit int32) *kinesis.GetRecordsOutput {
	x.t.Helper()
	out, err := x.getErr(it, limit)
	if err != nil {
		x.t.Fatalf("GetRecords: %v", err)
	}
	return out
}

func (x *fixture) getErr(it string, limit int32) (*kinesis.GetRecordsOutput, error) {
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(it)}
	if limit > 0 {
		in.Limit = aws.Int32(limit)
	}
	return x.f.GetRecords(context.Background(), in)
}

// data returns the payloads of records as strings.
func data(recs []types.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, string(r.Data))
	}
	return out
}

func (x *fixture) listShards(in *kinesis.ListShardsInput) []types.Shard {
	x.t.Helper()
	if in == nil {
		in = &kinesis.ListShardsInput{}
	}
	if in.NextToken == nil && in.StreamName == nil {
		in.StreamName = aws.String(x.stream)
	}
	out, err := x.f.ListShards(context.Background(), in)
	if err != nil {
		x.t.Fatalf("ListShards: %v", err)
	}
	return out.Shards
}

func ids(shards []types.Shard) []string {
	out := []string{}
	for _, s := range shards {
		out = append(out, *s.ShardId)
	}
	return out
}

// errorKind names the SDK error type of err, for table comparisons.
func errorKind(err error) string {
	var (
		nf  *types.ResourceNotFoundException
		ia  *types.InvalidArgumentException
		pte *types.ProvisionedThroughputExceededException
		ei  *types.ExpiredIteratorException
		en  *types.ExpiredNextTokenException
		iu  *types.ResourceInUseException
		le  *types.LimitExceededException
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &nf):
		return "ResourceNotFound"
	case errors.As(err, &ia):
		return "InvalidArgument"
	case errors.As(err, &pte):
		return "ProvisionedThroughputExceeded"
	case errors.As(err, &ei):
		return "ExpiredIterator"
	case errors.As(err, &en):
		return "ExpiredNextToken"
	case errors.As(err, &iu):
		return "ResourceInUse"
	case errors.As(err, &le):
		return "LimitExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	}
	return "other: " + err.Error()
}

// increasing reports whether seqs grow strictly by scan.CompareSequence.
func increasing(seqs []string) bool {
	for i := 1; i < len(seqs); i++ {
		if scan.CompareSequence(seqs[i-1], seqs[i]) >= 0 {
			return false
		}
	}
	return true
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("error %v does not contain %q", err, p)
		}
	}
}
