package scan_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// Resolve LATEST for every shard of a stream before reading it, and persist
// the result: a reader that later restarts from these positions cannot skip
// the records written in between. Here the stream is the in-memory Kinesis;
// in production the client is a *kinesis.Client.
func ExampleResolver_Resolve() {
	ctx := context.Background()
	clock := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	client := kinesistest.New(kinesistest.WithClock(clock))
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	for _, order := range []string{"apple", "pear", "plum"} {
		if _, err := client.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)}); err != nil {
			fmt.Println(err)
			return
		}
		clock.Advance(time.Second)
	}

	// One Resolver per process: its 8 workers are shared by every batch.
	resolver, err := scan.NewResolver(scan.Config{Now: clock.Now})
	if err != nil {
		fmt.Println(err)
		return
	}
	results, err := resolver.Resolve(ctx, scan.Request{
		Client: client,
		Stream: "orders",
		Shards: []string{"shardId-000000000000"},
	})
	if err != nil {
		fmt.Println(err) // nothing was resolved; try again later
		return
	}
	for _, r := range results {
		// Persist r.Position for r.Shard, then start reading there.
		fmt.Println(r.Shard, r.Position.Kind, r.Stats.Calls, "calls")
	}
	// Output:
	// shardId-000000000000 AFTER_SEQUENCE_NUMBER 2 calls
}
