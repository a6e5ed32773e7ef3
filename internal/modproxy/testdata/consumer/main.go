// Command consumer is a user of the published modules, built by
// scripts/proxycheck.sh outside the repository from a module proxy made of
// it: a Loader with a Sink, a DynamoDB coordinator, and kotel's metrics and
// traces as hooks. It constructs them (no network) and prints "ok"; it is
// never Run.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
	"github.com/tidemark/tidemark/kinesisload/kotel"
)

type printSink struct{}

func (printSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	for _, r := range b.Records {
		fmt.Printf("%s %s: %s\n", b.ShardID, r.SequenceNumber, r.Data)
	}
	return nil
}

func main() {
	awsCfg := aws.Config{Region: "eu-west-1"}
	coord, err := dynamo.New(dynamodb.NewFromConfig(awsCfg), dynamo.Config{Table: "orders-loader"})
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := kotel.New(metricnoop.NewMeterProvider())
	if err != nil {
		log.Fatal(err)
	}
	defer metrics.Close()
	traces, err := kotel.NewTraces(tracenoop.NewTracerProvider())
	if err != nil {
		log.Fatal(err)
	}
	_, err = kinesisload.New(kinesisload.Config{Stream: "orders", Sink: printSink{}},
		kinesisload.WithClient(kinesis.NewFromConfig(awsCfg)),
		kinesisload.WithCoordinator(coord),
		kinesisload.WithHooks(metrics, traces))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ok")
}
