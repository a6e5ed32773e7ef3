package bench_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// Issue 14: enhanced fan-out against polling, on the fake with the real
// limits, the real clock and a modelled network latency.

// netLatency is the modelled one-way network latency of every Kinesis call
// and of every pushed event.
const netLatency = 20 * time.Millisecond

// slowNet is the fake behind a network: every read call answers netLatency
// late, and every event of a subscription arrives netLatency after the
// fake pushed it (pipelined: events are not spaced out by it).
type slowNet struct {
	*kinesistest.Fake
	d time.Duration
}

func (s slowNet) wait(ctx context.Context) error {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s slowNet) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Fake.GetRecords(ctx, in, o...)
}

func (s slowNet) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Fake.GetShardIterator(ctx, in, o...)
}

func (s slowNet) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, o ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	es, err := s.Fake.SubscribeToShard(ctx, in, o...)
	if err != nil {
		return nil, err
	}
	d := &delayed{inner: es, out: make(chan types.SubscribeToShardEventStream), done: make(chan struct{}), stop: make(chan struct{})}
	go d.run(ctx, s.d)
	return d, nil
}

// delayed hands on the events of inner, each d after it came.
type delayed struct {
	inner kinesis.SubscribeToShardEventStreamReader
	out   chan types.SubscribeToShardEventStream
	done  chan struct{}
	stop  chan struct{}
	once  sync.Once
}

type stamped struct {
	ev types.SubscribeToShardEventStream
	at time.Time
}

func (d *delayed) run(ctx context.Context, lag time.Duration) {
	defer close(d.done)
	defer close(d.out)
	mid := make(chan stamped, 64)
	go func() {
		defer close(mid)
		for ev := range d.inner.Events() {
			select {
			case mid <- stamped{ev, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for s := range mid {
		time.Sleep(time.Until(s.at.Add(lag)))
		select {
		case d.out <- s.ev:
		case <-ctx.Done():
		case <-d.stop:
		}
		if ctx.Err() != nil || isClosed(d.stop) {
			d.inner.Close()
			for range mid {
			}
			return
		}
	}
}

func (d *delayed) Events() <-chan types.SubscribeToShardEventStream { return d.out }
func (d *delayed) Err() error                                       { return d.inner.Err() }
func (d *delayed) Close() error {
	d.once.Do(func() { close(d.stop) })
	err := d.inner.Close()
	<-d.done
	return err
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// latencySink records, for every record, the time from its put (the
// nanoseconds in its first 8 bytes) to its delivery.
type latencySink struct {
	mu    sync.Mutex
	lat   []time.Duration
	bytes map[string]*shardRate
}

type shardRate struct {
	bytes int64 // delivered so far
}

// totals returns the bytes delivered so far, by shard.
func (s *latencySink) totals() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for id, sr := range s.bytes {
		out[id] = sr.bytes
	}
	return out
}

func (s *latencySink) Deliver(_ context.Context, b kinesisload.Batch) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		if len(r.Data) >= 8 {
			s.lat = append(s.lat, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(r.Data)))))
		}
	}
	if s.bytes != nil {
		sr := s.bytes[b.ShardID]
		if sr == nil {
			sr = &shardRate{}
			s.bytes[b.ShardID] = sr
		}
		for _, r := range b.Records {
			sr.bytes += int64(len(r.Data))
		}
	}
	return nil
}

func (s *latencySink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lat)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// startLoader runs a Loader on stream "s" of api until the returned stop
// is called; it waits for the initialisation.
func startFanOutBenchLoader(b *testing.B, api scan.Client, sink kinesisload.Sink, mode kinesisload.ReadMode, consumer string, start scan.Position) (stop func()) {
	b.Helper()
	cfg := kinesisload.DefaultConfig()
	cfg.Stream, cfg.Sink, cfg.StartPosition = "s", sink, start
	if mode == kinesisload.ReadFanOut {
		cfg.ReadMode, cfg.ConsumerName = mode, consumer
	}
	store, err := kinesisload.NewJournalStore(context.Background(), journal.NewMemory(), 0)
	if err != nil {
		b.Fatal(err)
	}
	inited := make(chan struct{}, 1)
	l, err := kinesisload.New(cfg, kinesisload.WithClient(api), kinesisload.WithStore(store), kinesisload.WithHooks(initSignal(inited)))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	select {
	case <-inited:
	case err := <-done:
		b.Fatalf("Run: %v", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		<-done
	}
}

type initSignal chan struct{}

func (c initSignal) OnInitResolved(kinesisload.InitResolved) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// BenchmarkFanOutLatency measures the time from PutRecord to Deliver at 100
// records/s per shard on 2 shards for 10 s, with default settings, polling
// against fan-out, every read call and pushed event 20 ms late. Reported:
// p50 and p99 in milliseconds.
func BenchmarkFanOutLatency(b *testing.B) {
	for _, mode := range []kinesisload.ReadMode{kinesisload.ReadPolling, kinesisload.ReadFanOut} {
		b.Run(mode.String(), func(b *testing.B) {
			for range b.N {
				l := kinesistest.DefaultLimits()
				l.WriteBytesPerSecond, l.WriteRecordsPerSecond = 0, 0
				fake := kinesistest.New(kinesistest.WithLimits(l))
				kinesistest.NewStream(b, fake, "s", 2)
				_, keys := shardKeys(b, fake, "s")
				sink := &latencySink{}
				stop := startFanOutBenchLoader(b, slowNet{fake, netLatency}, sink, mode, "latency", scan.Latest())
				const perShard, secs = 100, 10
				tick := time.NewTicker(time.Second / perShard)
				sent := 0
				for range perShard * secs {
					<-tick.C
					for _, k := range keys {
						data := make([]byte, 100)
						binary.BigEndian.PutUint64(data, uint64(time.Now().UnixNano()))
						if _, err := fake.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(k), Data: data}); err != nil {
							b.Fatal(err)
						}
						sent++
					}
				}
				tick.Stop()
				deadline := time.Now().Add(30 * time.Second)
				for sink.count() < sent && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				stop()
				if got := sink.count(); got != sent {
					b.Fatalf("%d of %d records delivered", got, sent)
				}
				b.ReportMetric(float64(percentile(sink.lat, 0.5).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(percentile(sink.lat, 0.99).Microseconds())/1000, "p99-ms")
			}
		})
	}
}

// BenchmarkThreeApplications runs three Loaders (three applications, each
// with its own store and, in fan-out mode, its own consumer) on one 4-shard
// stream holding a backlog of 10 KiB records, for 12 s, polling against
// fan-out, on the fake with the real read limits and default settings.
// Reported: the lowest and the mean rate per shard of the three between
// 4 s and 12 s (past the first full budgets), as a fraction of 2 MiB/s.
func BenchmarkThreeApplications(b *testing.B) {
	for _, mode := range []kinesisload.ReadMode{kinesisload.ReadPolling, kinesisload.ReadFanOut} {
		b.Run(mode.String(), func(b *testing.B) {
			for range b.N {
				l := kinesistest.DefaultLimits()
				l.WriteBytesPerSecond, l.WriteRecordsPerSecond = 0, 0
				fake := kinesistest.New(kinesistest.WithLimits(l))
				kinesistest.NewStream(b, fake, "s", 4)
				load(b, fake, "s", 2600, limitRecordSize, 2) // 26 MiB per shard: more than 12 s at 2 MiB/s
				var sinks []*latencySink
				var stops []func()
				for app := range 3 {
					sink := &latencySink{bytes: map[string]*shardRate{}}
					sinks = append(sinks, sink)
					stops = append(stops, startFanOutBenchLoader(b, fake, sink, mode, fmt.Sprintf("app-%d", app), scan.TrimHorizon()))
				}
				time.Sleep(4 * time.Second)
				var before []map[string]int64
				for _, s := range sinks {
					before = append(before, s.totals())
				}
				const window = 8 * time.Second
				time.Sleep(window)
				lowest, sum, n := 1e9, 0.0, 0
				ids, _ := shardKeys(b, fake, "s")
				for i, s := range sinks {
					after := s.totals()
					for _, id := range ids { // a shard an application never read counts 0
						r := float64(after[id]-before[i][id]) / window.Seconds() / readBudget
						lowest = min(lowest, r)
						sum += r
						n++
					}
				}
				for _, stop := range stops {
					stop()
				}
				if sum == 0 {
					b.Fatal("nothing delivered")
				}
				b.ReportMetric(100*lowest, "lowest-%-of-2MiB/s")
				b.ReportMetric(100*sum/float64(n), "mean-%-of-2MiB/s")
			}
		})
	}
}
