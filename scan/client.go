package scan

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// Client holds only the Kinesis calls tidemark makes. A *kinesis.Client
// satisfies it as is, and so does the in-memory Kinesis in
// [github.com/tidemark/tidemark/kinesisload/kinesistest].
//
// Implementations must be safe for concurrent use. The variadic options are
// the SDK's per-call options; tidemark uses them to switch the SDK's own
// retries off where it bounds retries itself.
type Client interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

var _ Client = (*kinesis.Client)(nil)
