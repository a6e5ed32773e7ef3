package kinesistest

import (
	"context"
	"math/big"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// onDemandShards is how many shards an on-demand stream starts with.
const onDemandShards = 4

// CreateStream creates a stream whose ShardCount shards split the hash-key
// space evenly. Unlike real Kinesis the stream is ACTIVE at once. An
// ON_DEMAND stream without ShardCount gets 4 shards. A stream that exists
// already gives *types.ResourceInUseException; more open shards than the
// shard limit give *types.LimitExceededException.
func (f *Fake) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, _ ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	if in == nil {
		in = &kinesis.CreateStreamInput{}
	}
	if err := f.enter(ctx, OpCreateStream, aws.ToString(in.StreamName)); err != nil {
		return nil, err
	}
	name, err := f.streamName(in.StreamName, nil)
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case in.ShardCount != nil:
		n = int(*in.ShardCount)
		if n < 1 {
			return nil, errInvalidArgument("ShardCount %d of stream %s must be at least 1", n, name)
		}
	case in.StreamModeDetails != nil && in.StreamModeDetails.StreamMode == types.StreamModeOnDemand:
		n = onDemandShards
	default:
		return nil, errInvalidArgument("ShardCount is required for stream %s in PROVISIONED mode", name)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.streams[name]; ok {
		return nil, f.errStreamExists(name)
	}
	if cur := f.openShardTotal(); cur+n > f.cfg.shardLimit {
		return nil, f.errShardLimit(cur, n)
	}
	// The API carries the creation timestamp in milliseconds.
	now := f.now().Truncate(time.Millisecond)
	f.nextID++
	st := &stream{id: f.nextID, name: name, arn: f.streamARN(name), created: now}
	if old, ok := f.past[name]; ok {
		// A new stream of an old name: Kinesis gives it the same ARN but
		// a later creation timestamp (even on a clock that has not
		// moved), and its shard IDs start at shardId-000000000000 again.
		// Its sequence numbers continue above the old stream's, so that
		// an old number is refused.
		if !st.created.After(old.created) {
			st.created = old.created.Add(time.Millisecond)
		}
		st.seq = old.seq
	}
	step := new(big.Int).Div(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(int64(n)))
	for i := 0; i < n; i++ {
		lo := new(big.Int).Mul(step, big.NewInt(int64(i)))
		hi := new(big.Int).Sub(new(big.Int).Add(lo, step), big.NewInt(1))
		if i == n-1 {
			hi = new(big.Int).Set(maxHashKey)
		}
		st.addShard(lo, hi, "", "", now)
	}
	f.streams[name] = st
	f.byID[st.id] = st
	return &kinesis.CreateStreamOutput{}, nil
}

// DeleteStream deletes a stream and its records at once. Iterators of the
// stream then fail with *types.ResourceNotFoundException, even if a stream
// of the same name is created again. A stream created again under the name
// is a new stream, as in Kinesis: the same ARN, a later
// StreamCreationTimestamp, shard IDs from shardId-000000000000 again, and
// sequence numbers the old stream's shards never handed out, so that the
// old ones are refused.
func (f *Fake) DeleteStream(ctx context.Context, in *kinesis.DeleteStreamInput, _ ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error) {
	if in == nil {
		in = &kinesis.DeleteStreamInput{}
	}
	st, err := f.begin(ctx, OpDeleteStream, in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	delete(f.streams, st.name)
	delete(f.byID, st.id)
	f.past[st.name] = pastStream{created: st.created, seq: st.seq}
	return &kinesis.DeleteStreamOutput{}, nil
}

// DescribeStreamSummary describes a stream: always ACTIVE, its open shard
// count, retention, ARN and creation timestamp. The ARN and the creation
// timestamp together identify the stream: a stream deleted and created
// again under the same name has the same ARN and a later timestamp.
func (f *Fake) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if in == nil {
		in = &kinesis.DescribeStreamSummaryInput{}
	}
	st, err := f.begin(ctx, OpDescribeStreamSummary, in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	out := &kinesis.DescribeStreamSummaryOutput{
		StreamDescriptionSummary: &types.StreamDescriptionSummary{
			StreamName:              aws.String(st.name),
			StreamARN:               aws.String(st.arn),
			StreamStatus:            types.StreamStatusActive,
			StreamCreationTimestamp: aws.Time(st.created),
			OpenShardCount:          aws.Int32(int32(st.openShards())),
			RetentionPeriodHours:    aws.Int32(int32(f.cfg.retention.Hours())),
			EncryptionType:          types.EncryptionTypeNone,
			EnhancedMonitoring:      []types.EnhancedMetrics{{ShardLevelMetrics: []types.MetricsName{}}},
			ConsumerCount:           aws.Int32(0),
			StreamModeDetails:       &types.StreamModeDetails{StreamMode: types.StreamModeProvisioned},
		},
	}
	setDate(&out.ResultMetadata, f.now())
	return out, nil
}

// requestStream names the stream of a request for fault matching, without
// validating it ("" when it cannot be told).
func (f *Fake) requestStream(name, arn *string) string {
	n, err := f.streamName(name, arn)
	if err != nil {
		return ""
	}
	return n
}
