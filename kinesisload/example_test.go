package kinesisload_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

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
	// Every zero field of a Config means its default.
	loader, err := kinesisload.New(kinesisload.Config{
		Stream:        "orders",
		Sink:          sink,
		Dir:           dir,                // the journal: one directory holds every decision
		StartPosition: scan.TrimHorizon(), // the default, LATEST, would skip these three
	},
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

// memoryDB is a stand-in for a database with transactions: rows and
// checkpoints change together, under one lock.
type memoryDB struct {
	mu          sync.Mutex
	rows        []string
	checkpoints map[string]scan.Position
}

// Deliver stores the batch and its checkpoint in one "transaction".
func (db *memoryDB) Deliver(ctx context.Context, b kinesisload.Batch) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, r := range b.Records {
		db.rows = append(db.rows, string(r.Data))
	}
	db.checkpoints[b.ShardID] = b.Checkpoint
	return nil
}

// Checkpoints loads what Deliver stored: the Loader resumes from there.
func (db *memoryDB) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make(map[string]scan.Position, len(db.checkpoints))
	for id, p := range db.checkpoints {
		out[id] = p
	}
	return out, nil
}

// A TransactionalSink stores each batch's checkpoint with its records, so
// that a restart resumes exactly after the last stored record: exactly once.
func ExampleTransactionalSink() {
	ctx := context.Background()
	fake := kinesistest.New()
	_, _ = fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	put := func(s string) {
		_, _ = fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(s), Data: []byte(s)})
	}
	db := &memoryDB{checkpoints: map[string]scan.Position{}}

	// runUntil runs a Loader with a new journal each time (as if the
	// journal were lost) until the database holds n rows.
	runUntil := func(n int) {
		dir, _ := os.MkdirTemp("", "tidemark-example")
		defer os.RemoveAll(dir)
		cfg := kinesisload.DefaultConfig()
		cfg.Stream, cfg.Sink, cfg.Dir, cfg.StartPosition = "orders", db, dir, scan.TrimHorizon()
		loader, _ := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
		done := make(chan error)
		go func() { done <- loader.Run(ctx) }()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			db.mu.Lock()
			rows := len(db.rows)
			db.mu.Unlock()
			if rows >= n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = loader.Close(ctx)
		<-done
	}
	put("apple")
	put("pear")
	runUntil(2)
	put("plum")
	runUntil(3) // the database's checkpoint wins over the empty journal
	fmt.Println(db.rows)
	// Output:
	// [apple pear plum]
}
