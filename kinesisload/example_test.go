package kinesisload_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// A Sink that prints what it receives, fed from an in-memory Kinesis. With
// a real stream, pass a *kinesis.Client made from config.LoadDefaultConfig
// to WithClient instead (or leave WithClient out).
func ExampleLoader() {
	ctx := context.Background()
	fake := kinesistest.New()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	for _, order := range []string{"apple", "pear", "plum"} {
		_, _ = fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
	}

	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)

	var loader *kinesisload.Loader
	var mu sync.Mutex
	got := 0
	sink := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b.Records {
			fmt.Printf("%s: %s\n", b.ShardID, r.Data)
			got++
		}
		if got == 3 {
			go loader.Close(context.Background()) // stop once everything arrived
		}
		return nil
	})
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = "orders"
	cfg.Sink = sink
	cfg.Dir = dir                          // the journal: one directory holds every decision
	cfg.StartPosition = scan.TrimHorizon() // the default, LATEST, would skip these three
	loader, err := kinesisload.New(cfg,
		kinesisload.WithClient(fake),
		kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = loader.Run(ctx)
	fmt.Println("Run:", err)
	// Output:
	// shardId-000000000000: apple
	// shardId-000000000000: pear
	// shardId-000000000000: plum
	// Run: kinesisload: loader closed
}
