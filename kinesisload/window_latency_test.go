package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// latencySink records, for every record, the time from its arrival in
// Kinesis to its Deliver.
type latencySink struct {
	mu        sync.Mutex
	latencies []time.Duration
	records   int
}

func (s *latencySink) Deliver(_ context.Context, b Batch) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		s.latencies = append(s.latencies, now.Sub(r.ArrivalTime))
	}
	s.records += len(b.Records)
	return nil
}

// quantile returns the q-quantile (0 to 1) of ds, sorted in place.
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// The latency bound of windows, on the bubble's manual clock
// (testing/synctest: time moves only when every goroutine of the Loader,
// the in-memory Kinesis and the producer waits, so what is measured is
// the Loader's logic, not this machine's speed): from a record's arrival
// to its Deliver, at most MaxBatchWait plus one poll interval (IdleWait at
// the tip), at the tip and under load (records every few milliseconds on
// every shard, well under the read cap), for windows per shard and across
// shards, in both read modes (a fan-out event is pushed at once).
func TestWindowLatencyBound(t *testing.T) {
	const wait, poll = time.Second, time.Second
	for _, tt := range []struct {
		name  string
		multi bool
		mode  ReadMode
		gap   time.Duration // between two records on a shard
	}{
		{"per shard, at the tip", false, ReadPolling, 2700 * time.Millisecond},
		{"per shard, under load", false, ReadPolling, 7 * time.Millisecond},
		{"multi, at the tip", true, ReadPolling, 2700 * time.Millisecond},
		{"multi, under load", true, ReadPolling, 7 * time.Millisecond},
		{"multi, fan-out, under load", true, ReadFanOut, 7 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const shards = 8
				f := kinesistest.New()
				kinesistest.NewStream(t, f, "orders", shards)
				sink := &latencySink{}
				cfg := Config{Stream: "orders", StartPosition: scan.TrimHorizon(), Sink: sink, IdleWait: poll, MaxBatchWait: wait}
				if tt.multi {
					cfg.Sink = multiLatency{sink}
				}
				if tt.mode == ReadFanOut {
					cfg.ReadMode, cfg.ConsumerName = ReadFanOut, testConsumer
				}
				if _, multi := cfg.Sink.(MultiSink); multi != tt.multi {
					t.Fatalf("the Sink is a MultiSink: %v, want %v", multi, tt.multi)
				}
				l, err := New(cfg, WithClient(f), WithStore(memStore(t, journal.NewMemory())), WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- l.Run(context.Background()) }()
				for !l.Stats().Initialised {
					time.Sleep(10 * time.Millisecond)
				}
				// The producer: a record on each shard every gap (with a
				// jitter), for 40 s (10 s with -short).
				produce := 40 * time.Second
				if testing.Short() {
					produce = 10 * time.Second
				}
				rng := rand.New(rand.NewPCG(1, 2))
				put := 0
				for end := time.Now().Add(produce); time.Now().Before(end); {
					for sh := range shards {
						_, err := f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("orders"),
							PartitionKey: aws.String(fmt.Sprint(sh)), ExplicitHashKey: aws.String(hashKeyOf(t, f, sh)), Data: []byte("x")})
						if err != nil {
							t.Fatal(err)
						}
						put++
					}
					time.Sleep(tt.gap + time.Duration(rng.Int64N(int64(tt.gap/3+1))))
				}
				time.Sleep(wait + poll + time.Second)
				if err := l.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := <-done; !errors.Is(err, ErrClosed) {
					t.Fatalf("Run = %v", err)
				}
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if sink.records != put {
					t.Fatalf("%d records delivered, want %d", sink.records, put)
				}
				// ArrivalTime has whole milliseconds: 1 ms more.
				bound := wait + poll + time.Millisecond
				p50, p99, most := quantile(sink.latencies, 0.5), quantile(sink.latencies, 0.99), quantile(sink.latencies, 1)
				t.Logf("%d records: latency p50 %v, p99 %v, max %v (bound %v)", put, p50, p99, most, bound)
				if p99 > bound || most > bound {
					t.Errorf("latency p99 %v, max %v: want at most MaxBatchWait + one poll = %v", p99, most, bound)
				}
			})
		})
	}
}

// multiLatency is latencySink as a MultiSink.
type multiLatency struct{ *latencySink }

func (m multiLatency) DeliverMulti(ctx context.Context, bs []Batch) error {
	return deliverEach(ctx, m.latencySink, bs)
}

// hashKeyOf returns the starting hash key of the stream's i-th shard.
func hashKeyOf(t *testing.T, f *kinesistest.Fake, i int) string {
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.Shards[i].HashKeyRange.StartingHashKey)
}
