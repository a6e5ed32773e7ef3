package kinesistest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// A test creates a stream in the fake, writes a record and reads it back,
// exactly as it would with a *kinesis.Client.
func Example() {
	ctx := context.Background()
	clock := kinesistest.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	f := kinesistest.New(kinesistest.WithClock(clock))

	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	put, err := f.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName:   aws.String("orders"),
		PartitionKey: aws.String("customer-42"),
		Data:         []byte(`{"order":1}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	it, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName:        aws.String("orders"),
		ShardId:           put.ShardId,
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range out.Records {
		fmt.Printf("%s %s at %s\n", *r.PartitionKey, r.Data, r.ApproximateArrivalTimestamp.Format(time.RFC3339))
	}
	fmt.Println("behind the tip:", *out.MillisBehindLatest, "ms")
	// Output:
	// customer-42 {"order":1} at 2026-01-02T03:04:05Z
	// behind the tip: 0 ms
}

// Iterators expire after five minutes on the fake's clock, as in Kinesis.
func ExampleManualClock() {
	ctx := context.Background()
	clock := kinesistest.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	f := kinesistest.New(kinesistest.WithClock(clock))
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	it, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName:        aws.String("orders"),
		ShardId:           aws.String("shardId-000000000000"),
		ShardIteratorType: types.ShardIteratorTypeLatest,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(6 * time.Minute)
	_, err = f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	var expired *types.ExpiredIteratorException
	fmt.Println("expired:", errors.As(err, &expired))
	// Output:
	// expired: true
}

// Fault injection makes a failure happen exactly where a test wants it:
// here the second GetShardIterator call of shard 0 is throttled.
func ExampleFake_Inject() {
	ctx := context.Background()
	f := kinesistest.New()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	f.Inject(kinesistest.Fault{
		Op:    kinesistest.OpGetShardIterator,
		Shard: "shardId-000000000000",
		Nth:   2,
		Err:   &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded")},
	})
	for i := 1; i <= 3; i++ {
		_, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
			StreamName:        aws.String("orders"),
			ShardId:           aws.String("shardId-000000000000"),
			ShardIteratorType: types.ShardIteratorTypeLatest,
		})
		fmt.Printf("call %d: %v\n", i, err)
	}
	// Output:
	// call 1: <nil>
	// call 2: ProvisionedThroughputExceededException: Rate exceeded
	// call 3: <nil>
}
