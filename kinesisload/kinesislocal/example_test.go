package kinesislocal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
	"github.com/tidemark/tidemark/scan"
)

// A Loader reading the stream "orders" of a kinesis-local on its default
// plain port with enhanced fan-out, until Ctrl-C. The Loader registers the
// consumer "orders-local" if it is missing. It needs kinesis-local running
// (see the package doc), so it is not run as a test.
func Example() {
	client, err := kinesislocal.NewClient("http://127.0.0.1:4568")
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, err := os.MkdirTemp("", "orders-loader")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	cfg := kinesisload.DefaultConfig()
	cfg.Stream = "orders"
	cfg.Dir = dir
	cfg.StartPosition = scan.TrimHorizon()
	cfg.ReadMode = kinesisload.ReadFanOut // SubscribeToShard: what the client's transport makes work
	cfg.ConsumerName = "orders-local"
	cfg.Sink = kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		for _, r := range b.Records {
			fmt.Printf("%s %s: %s\n", b.ShardID, r.SequenceNumber, r.Data)
		}
		return nil
	})
	loader, err := kinesisload.New(cfg, kinesisload.WithClient(client))
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		loader.Close(context.Background()) // finish and commit the batches in flight
	}()
	if err := loader.Run(context.Background()); !errors.Is(err, kinesisload.ErrClosed) {
		fmt.Println("Run:", err)
	}
}

// A client from the standard AWS configuration (the environment, the
// shared files) pointed at kinesis-local: give it the endpoint and wrap
// its HTTP transport. The configuration must have a region and
// credentials (any: kinesis-local checks none).
func ExampleTransport() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:4568")
		o.HTTPClient = &http.Client{Transport: kinesislocal.Transport(nil)}
	})
	_ = client // for kinesisload.WithClient, with Config.ReadMode = kinesisload.ReadFanOut
}
