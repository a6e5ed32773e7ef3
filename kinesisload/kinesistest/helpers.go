package kinesistest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// NewStream creates a stream of the given number of shards through api (the
// fake or a real client) and waits, up to 30 s, until it is ACTIVE. It fails
// tb if it cannot.
func NewStream(tb testing.TB, api API, name string, shards int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(shards))}); err != nil {
		tb.Fatalf("kinesistest: create stream %s with %d shards: %v", name, shards, err)
	}
	if err := WaitActive(ctx, api, name); err != nil {
		tb.Fatalf("kinesistest: %v", err)
	}
}

// WaitActive polls DescribeStreamSummary until stream name is ACTIVE or ctx
// ends. The fake's streams are ACTIVE at once; real Kinesis and the
// emulators take a while after CreateStream, SplitShard and MergeShards.
func WaitActive(ctx context.Context, api API, name string) error {
	for {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err == nil && out.StreamDescriptionSummary != nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				err = ctx.Err()
			}
			return &waitError{stream: name, err: err}
		case <-t.C:
		}
	}
}

type waitError struct {
	stream string
	err    error
}

func (e *waitError) Error() string {
	return "stream " + e.stream + " did not become ACTIVE: " + e.err.Error()
}

func (e *waitError) Unwrap() error { return e.err }
