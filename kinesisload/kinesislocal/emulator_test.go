package kinesislocal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
	"github.com/tidemark/tidemark/scan"
)

// deadline bounds every wait on kinesis-local: generous, since a loaded
// 2-core machine under -race runs it slowly. A healthy run takes seconds.
const deadline = 2 * time.Minute

// subscriptions counts the SubscribeToShard calls of a client that
// succeeded, per shard. The SDK returns from the call only after it has
// read the initial-response event, so a count is a subscription the SDK
// accepted.
type subscriptions struct {
	mu sync.Mutex
	n  map[string]int
}

// option adds the counting to a client's middleware.
func (s *subscriptions) option(o *kinesis.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("countSubscriptions",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if p, ok := in.Parameters.(*kinesis.SubscribeToShardInput); ok && err == nil {
					s.mu.Lock()
					if s.n == nil {
						s.n = map[string]int{}
					}
					s.n[aws.ToString(p.ShardId)]++
					s.mu.Unlock()
				}
				return out, md, err
			}), middleware.After)
	})
}

func (s *subscriptions) shards() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.n))
}

// delivered records what a Sink received, in order, per shard.
type delivered struct {
	mu      sync.Mutex
	records map[string][]kinesisload.Record
	count   int
	changed chan struct{} // closed and replaced on every delivery
}

func newDelivered() *delivered {
	return &delivered{records: map[string][]kinesisload.Record{}, changed: make(chan struct{})}
}

// Deliver implements kinesisload.Sink.
func (d *delivered) Deliver(_ context.Context, b kinesisload.Batch) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.records[b.ShardID] = append(d.records[b.ShardID], b.Records...)
	d.count += len(b.Records)
	close(d.changed)
	d.changed = make(chan struct{})
	return nil
}

// waitFor waits until n records were delivered, or fails the test after
// the deadline.
func (d *delivered) waitFor(t *testing.T, n int, runDone <-chan struct{}) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		d.mu.Lock()
		count, changed := d.count, d.changed
		d.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-changed:
		case <-runDone:
			t.Fatalf("Run returned with %d of %d records delivered", count, n)
		case <-timeout:
			t.Fatalf("%d of %d records delivered within %v", count, n, deadline)
		}
	}
}

// TestLoaderFanOutAgainstKinesisLocal loads a kinesis-local stream in
// fan-out mode with a client from NewClient and nothing else: records put
// before the Loader started (it starts at TRIM_HORIZON) and while it runs
// all arrive, each once, in shard order, through subscriptions to both
// shards. The same SubscribeToShard with the SDK's stock client fails, as
// the package doc says.
func TestLoaderFanOutAgainstKinesisLocal(t *testing.T) {
	e := emulator.Start(t, emulator.KinesisLocal)
	var subs subscriptions
	c, err := kinesislocal.NewClient(e.Endpoint, subs.option)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*deadline)
	defer cancel()

	const stream, consumer = "orders", "kinesislocal-test"
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := emulator.WaitStreamActive(ctx, c, stream); err != nil {
		t.Fatal(err)
	}
	put := map[string][]string{} // shard -> data, in the order of the puts' answers
	putRange := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			data := fmt.Sprintf("order-%02d", i)
			res, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String(data), Data: []byte(data)})
			if err != nil {
				t.Fatalf("put %s: %v", data, err)
			}
			put[aws.ToString(res.ShardId)] = append(put[aws.ToString(res.ShardId)], data)
		}
	}
	putRange(1, 10) // before the Loader: read from TRIM_HORIZON

	sink := newDelivered()
	cfg := kinesisload.DefaultConfig()
	cfg.Stream, cfg.Sink, cfg.Dir = stream, sink, t.TempDir()
	cfg.StartPosition = scan.TrimHorizon()
	cfg.ReadMode, cfg.ConsumerName = kinesisload.ReadFanOut, consumer
	loader, err := kinesisload.New(cfg, kinesisload.WithClient(c), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	var runErr error
	go func() {
		defer close(runDone)
		runErr = loader.Run(context.Background())
	}()
	putRange(11, 20) // while it runs
	sink.waitFor(t, 20, runDone)
	closeCtx, cancelClose := context.WithTimeout(context.Background(), deadline)
	defer cancelClose()
	if err := loader.Close(closeCtx); err != nil {
		t.Errorf("Close: %v", err)
	}
	<-runDone
	if !errors.Is(runErr, kinesisload.ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", runErr)
	}

	got := map[string][]string{}
	for shard, rs := range sink.records {
		for i, r := range rs {
			got[shard] = append(got[shard], string(r.Data))
			if i > 0 && scan.CompareSequence(rs[i-1].SequenceNumber, r.SequenceNumber) >= 0 {
				t.Errorf("shard %s: %s (seq %s) delivered after seq %s", shard, r.Data, r.SequenceNumber, rs[i-1].SequenceNumber)
			}
		}
	}
	if diff := cmp.Diff(put, got); diff != "" {
		t.Errorf("records per shard (-put +delivered):\n%s", diff)
	}
	if len(put) != 2 {
		t.Errorf("the records went to %d shards, want both (else one shard's subscription is untested)", len(put))
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(put)), subs.shards()); diff != "" {
		t.Errorf("shards with an accepted subscription (-want +got):\n%s", diff)
	}

	// The consumer the Loader registered, subscribed with the SDK's stock
	// client: kinesis-local's answer lacks the initial-response event.
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := c.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{
		StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String(consumer)})
	if err != nil {
		t.Fatalf("the Loader's consumer: %v", err)
	}
	stock := stockClient(e.Endpoint)
	var inUse *types.ResourceInUseException
	for {
		var out *kinesis.SubscribeToShardOutput
		out, err = stock.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
			ConsumerARN: desc.ConsumerDescription.ConsumerARN, ShardId: aws.String("shardId-000000000000"),
			StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
		})
		if err == nil {
			out.GetStream().Close()
		}
		// The Loader's subscription counts as active for a few
		// seconds after it closed it.
		if !errors.As(err, &inUse) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "expected initial-response") {
		t.Errorf("SubscribeToShard with the stock client: %v, want the SDK's \"expected initial-response\" error", err)
	}
}
