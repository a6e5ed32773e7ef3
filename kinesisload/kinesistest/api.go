package kinesistest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/scan"
)

// API is every Kinesis call the in-memory Kinesis implements, with the SDK's
// signatures: the calls tidemark reads with ([scan.Client]) and the calls a
// test needs to set a stream up and change it. A *kinesis.Client satisfies
// it too, so one test can run against the fake and against a real endpoint.
type API interface {
	scan.Client
	CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	DeleteStream(ctx context.Context, in *kinesis.DeleteStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
	PutRecord(ctx context.Context, in *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error)
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
	SplitShard(ctx context.Context, in *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error)
	MergeShards(ctx context.Context, in *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error)
}

var _ API = (*kinesis.Client)(nil)
