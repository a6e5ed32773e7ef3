package kinesistest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// Aggregate builds the record a KPL producer would write, so that a Sink
// can be tested against aggregated input: the Loader delivers it as the
// user records it carries, each keyed by sequence number and sub-sequence
// number.
func ExampleAggregate() {
	ctx := context.Background()
	fake := kinesistest.New()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	entry, err := kinesistest.Aggregate([]kinesistest.UserRecord{
		{PartitionKey: "customer-1", Data: []byte("apple")},
		{PartitionKey: "customer-2", Data: []byte("pear")},
		{PartitionKey: "customer-1", Data: []byte("plum")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := fake.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: []types.PutRecordsRequestEntry{entry}}); err != nil {
		fmt.Println(err)
		return
	}

	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	var loader *kinesisload.Loader
	var once sync.Once
	sink := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		for _, r := range b.Records {
			fmt.Printf("%s/%d %s: %s\n", r.SequenceNumber, r.SubSequenceNumber, r.PartitionKey, r.Data)
		}
		once.Do(func() { go loader.Close(context.Background()) })
		return nil
	})
	cfg := kinesisload.DefaultConfig()
	cfg.Stream, cfg.Sink, cfg.Dir = "orders", sink, dir
	cfg.StartPosition = scan.TrimHorizon()
	loader, err = kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = loader.Run(ctx)
	// Output:
	// 49000000000000000000000000000000000002000000000000000000/0 customer-1: apple
	// 49000000000000000000000000000000000002000000000000000000/1 customer-2: pear
	// 49000000000000000000000000000000000002000000000000000000/2 customer-1: plum
}
