package kotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/kotel"
	"github.com/tidemark/tidemark/scan"
)

// A Loader over an in-memory Kinesis reports to an OpenTelemetry SDK; a
// ManualReader reads the metrics back. In a program, give New the
// MeterProvider of the program's exporter (or otel.GetMeterProvider()).
func Example() {
	ctx := context.Background()
	fake := kinesistest.New()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	for _, order := range []string{"apple", "pear", "plum"} {
		_, _ = fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
	}
	dir, _ := os.MkdirTemp("", "tidemark-kotel-example")
	defer os.RemoveAll(dir)

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)
	metrics, err := kotel.New(provider)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer metrics.Close()

	var loader *kinesisload.Loader
	var mu sync.Mutex
	got := 0
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = "orders"
	cfg.Dir = dir
	cfg.StartPosition = scan.TrimHorizon()
	cfg.Sink = kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if got += len(b.Records); got == 3 {
			go loader.Close(context.Background()) // stop once everything arrived
		}
		return nil
	})
	loader, err = kinesisload.New(cfg,
		kinesisload.WithClient(fake),
		kinesisload.WithHooks(metrics),
		kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Run:", loader.Run(ctx))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if m.Name == "tidemark.records.delivered" {
				for _, dp := range d.DataPoints {
					shard, _ := dp.Attributes.Value(kotel.AttrShard)
					fmt.Printf("%s{%s}: %d\n", m.Name, shard.AsString(), dp.Value)
				}
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				switch m.Name {
				case "tidemark.shards":
					if state, _ := dp.Attributes.Value(kotel.AttrState); state.AsString() == "ACTIVE" {
						fmt.Printf("%s{ACTIVE}: %d\n", m.Name, dp.Value)
					}
				case "tidemark.shard.millis_behind_latest":
					shard, _ := dp.Attributes.Value(kotel.AttrShard)
					fmt.Printf("%s{%s}: reported, in %s\n", m.Name, shard.AsString(), m.Unit)
				}
			}
		}
	}
	// Unordered output:
	// Run: kinesisload: loader closed
	// tidemark.records.delivered{shardId-000000000000}: 3
	// tidemark.shard.millis_behind_latest{shardId-000000000000}: reported, in ms
	// tidemark.shards{ACTIVE}: 1
}

// A Loader over an in-memory Kinesis records spans with an OpenTelemetry
// SDK; an in-memory exporter holds them. In a program, give NewTraces the
// TracerProvider of the program's exporter (or otel.GetTracerProvider()),
// and the Traces to WithHooks next to the Metrics of New.
func ExampleNewTraces() {
	ctx := context.Background()
	fake := kinesistest.New()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)}); err != nil {
		fmt.Println(err)
		return
	}
	for _, order := range []string{"apple", "pear", "plum"} {
		_, _ = fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
	}
	dir, _ := os.MkdirTemp("", "tidemark-kotel-example")
	defer os.RemoveAll(dir)

	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer provider.Shutdown(ctx)
	traces, err := kotel.NewTraces(provider)
	if err != nil {
		fmt.Println(err)
		return
	}

	var loader *kinesisload.Loader
	var mu sync.Mutex
	got := 0
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = "orders"
	cfg.Dir = dir
	cfg.StartPosition = scan.TrimHorizon()
	cfg.Sink = kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if got += len(b.Records); got == 3 {
			go loader.Close(context.Background()) // stop once everything arrived
		}
		return nil
	})
	loader, err = kinesisload.New(cfg,
		kinesisload.WithClient(fake),
		kinesisload.WithHooks(traces),
		kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Run:", loader.Run(ctx))

	seen := map[string]bool{}
	var processed int64
	for _, s := range exporter.GetSpans() {
		if !seen[s.Name] {
			seen[s.Name] = true
			fmt.Printf("%s (%s)\n", s.Name, s.SpanKind)
		}
		if s.Name == "process orders" {
			for _, a := range s.Attributes {
				if a.Key == semconv.MessagingBatchMessageCountKey {
					processed += a.Value.AsInt64()
				}
			}
		}
	}
	fmt.Println("records processed:", processed)
	// Unordered output:
	// Run: kinesisload: loader closed
	// initialise orders (internal)
	// lease acquired orders (internal)
	// fetch orders (internal)
	// process orders (consumer)
	// lease held orders (internal)
	// records processed: 3
}
