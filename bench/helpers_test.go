package bench_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

var loadProgress = flag.Bool("load.progress", false, "print the progress of loading a stream to stderr")

// shardKeys lists the shards of stream and the starting hash key of each,
// to route records with ExplicitHashKey.
func shardKeys(tb testing.TB, api scan.Client, stream string) (ids, keys []string) {
	tb.Helper()
	out, err := api.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		tb.Fatalf("ListShards %s: %v", stream, err)
	}
	for _, s := range out.Shards {
		ids = append(ids, aws.ToString(s.ShardId))
		keys = append(keys, aws.ToString(s.HashKeyRange.StartingHashKey))
	}
	return ids, keys
}

// load writes perShard records of size bytes of data (partition key "k")
// to every shard of stream, in PutRecords calls of 500 records, from
// writers goroutines, retrying records a shard refused. It returns the last
// sequence number of every shard and the time it took.
func load(tb testing.TB, api kinesistest.API, stream string, perShard, size, writers int) (map[string]string, time.Duration) {
	tb.Helper()
	ids, keys := shardKeys(tb, api, stream)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	total := perShard * len(ids)
	var next atomic.Int64
	var mu sync.Mutex
	last := make(map[string]string, len(ids))
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for {
				lo := int(next.Add(500)) - 500
				if lo >= total {
					return
				}
				batch := make([]types.PutRecordsRequestEntry, 0, 500)
				for i := lo; i < min(lo+500, total); i++ {
					batch = append(batch, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i%len(keys)])})
				}
				for len(batch) > 0 {
					out, err := api.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch})
					if err != nil {
						mu.Lock()
						firstErr = errors.Join(firstErr, fmt.Errorf("PutRecords %s: %w", stream, err))
						mu.Unlock()
						return
					}
					var retry []types.PutRecordsRequestEntry
					mu.Lock()
					for i, r := range out.Records {
						if r.ErrorCode != nil {
							retry = append(retry, batch[i])
							continue
						}
						id, seq := aws.ToString(r.ShardId), aws.ToString(r.SequenceNumber)
						if prev, ok := last[id]; !ok || scan.CompareSequence(seq, prev) > 0 {
							last[id] = seq
						}
					}
					mu.Unlock()
					batch = retry
					if *loadProgress && (lo/500)%20 == 0 {
						fmt.Fprintf(os.Stderr, "load %s: %d of %d records at %v\n", stream, lo+500, total, time.Since(start).Round(time.Millisecond))
					}
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
	return last, time.Since(start)
}

// tally is what a Sink received from one shard.
type tally struct {
	first, last         time.Time
	firstBytes, bytes   int64
	records, batches    int64
	firstRecs           int64
	lastSeq             string
	outOfOrderOrRepeats int64
}

// sink counts what it receives, takes delay per batch, and closes done when
// want records have arrived.
type sink struct {
	delay time.Duration
	want  int64

	n    atomic.Int64
	mu   sync.Mutex
	by   map[string]*tally
	done chan struct{}
	once sync.Once
}

func newSink(delay time.Duration, want int64) *sink {
	return &sink{delay: delay, want: want, by: make(map[string]*tally), done: make(chan struct{})}
}

// Deliver implements kinesisload.Sink.
func (s *sink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	var bytes int64
	for _, r := range b.Records {
		bytes += int64(len(r.Data) + len(r.PartitionKey))
	}
	s.add(b.ShardID, b.Records, bytes)
	return nil
}

func (s *sink) add(shard string, recs []kinesisload.Record, bytes int64) {
	if len(recs) == 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	t := s.by[shard]
	if t == nil {
		t = &tally{first: now, firstBytes: bytes, firstRecs: int64(len(recs))}
		s.by[shard] = t
	}
	for _, r := range recs {
		if t.lastSeq != "" && scan.CompareSequence(r.SequenceNumber, t.lastSeq) <= 0 {
			t.outOfOrderOrRepeats++
		}
		t.lastSeq = r.SequenceNumber
	}
	t.last = now
	t.bytes += bytes
	t.records += int64(len(recs))
	t.batches++
	s.mu.Unlock()
	if s.n.Add(int64(len(recs))) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
}

// tallies returns a copy of the per-shard tallies.
func (s *sink) tallies() map[string]tally {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]tally, len(s.by))
	for k, v := range s.by {
		m[k] = *v
	}
	return m
}

// steady is the mean per-shard steady rate in bytes/s: the bytes after each
// shard's first batch over the time from its first to its last batch (the
// first page is read on a full budget, so it is left out), and the lowest
// shard's rate.
func steady(ts map[string]tally) (mean, lowest float64) {
	lowest = -1
	for _, t := range ts {
		d := t.last.Sub(t.first).Seconds()
		if d <= 0 {
			continue
		}
		r := float64(t.bytes-t.firstBytes) / d
		mean += r
		if lowest < 0 || r < lowest {
			lowest = r
		}
	}
	if len(ts) > 0 {
		mean /= float64(len(ts))
	}
	return mean, lowest
}

// fileStore returns a JournalStore on a file journal in a fresh temporary
// directory, closed when tb ends.
func fileStore(tb testing.TB) *kinesisload.JournalStore {
	tb.Helper()
	j, err := journal.Open(tb.TempDir(), journal.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { j.Close() })
	s, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// memStore is a PositionStore that keeps progress in memory only: nothing
// is durable. It is the baseline of the checkpoint overhead.
type memStore struct {
	mu  sync.Mutex
	m   map[string]map[string]kinesisload.ShardProgress
	ids map[string]kinesisload.StreamIdentity
}

func newMemStore() *memStore {
	return &memStore{m: make(map[string]map[string]kinesisload.ShardProgress), ids: make(map[string]kinesisload.StreamIdentity)}
}

// Identity implements kinesisload.PositionStore.
func (s *memStore) Identity(_ context.Context, stream string) (kinesisload.StreamIdentity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[stream], nil
}

// SetIdentity implements kinesisload.PositionStore.
func (s *memStore) SetIdentity(_ context.Context, stream string, id kinesisload.StreamIdentity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.ids[stream]; !old.IsZero() && !old.Equal(id) {
		return &kinesisload.StreamMismatchError{Stream: stream, Stored: old, Current: id}
	}
	s.ids[stream] = id
	return nil
}

// StartOver implements kinesisload.PositionStore. A benchmark never
// re-creates a stream, so nothing is archived: the progress is dropped.
func (s *memStore) StartOver(_ context.Context, stream string, id kinesisload.StreamIdentity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, stream)
	s.ids[stream] = id
	return nil
}

// Load implements kinesisload.PositionStore.
func (s *memStore) Load(_ context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]kinesisload.ShardProgress, len(s.m[stream]))
	for k, v := range s.m[stream] {
		v.Parents = append([]string(nil), v.Parents...)
		out[k] = v
	}
	return out, nil
}

// Save implements kinesisload.PositionStore. A benchmark never stores a
// position behind another, so a later position simply replaces an earlier
// one, and a state only advances.
func (s *memStore) Save(_ context.Context, stream string, updates []kinesisload.ShardProgress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m[stream]
	if m == nil {
		m = make(map[string]kinesisload.ShardProgress)
		s.m[stream] = m
	}
	for _, u := range updates {
		p := m[u.ShardID]
		p.ShardID = u.ShardID
		for _, par := range u.Parents {
			if !contains(p.Parents, par) {
				p.Parents = append(p.Parents, par)
			}
		}
		if u.State > p.State {
			p.State = u.State
		}
		if u.Position.Kind != 0 {
			p.Position = u.Position
		}
		m[u.ShardID] = p
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// newLoader returns a Loader of stream from TRIM_HORIZON into sk through
// client, with store.
func newLoader(tb testing.TB, client scan.Client, stream string, sk kinesisload.Sink, store kinesisload.PositionStore, edit func(*kinesisload.Config), opts ...kinesisload.Option) *kinesisload.Loader {
	tb.Helper()
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = stream
	cfg.Sink = sk
	cfg.StartPosition = scan.TrimHorizon()
	if edit != nil {
		edit(&cfg)
	}
	opts = append([]kinesisload.Option{kinesisload.WithClient(client), kinesisload.WithStore(store)}, opts...)
	l, err := kinesisload.New(cfg, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// runUntil runs l until done is closed, closes it and returns how long Run
// ran until done.
func runUntil(tb testing.TB, l *kinesisload.Loader, done <-chan struct{}, limit time.Duration) time.Duration {
	tb.Helper()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- l.Run(context.Background()) }()
	var elapsed time.Duration
	select {
	case <-done:
		elapsed = time.Since(start)
	case err := <-errc:
		tb.Fatalf("Run returned early: %v", err)
	case <-time.After(limit):
		elapsed = time.Since(start)
		tb.Errorf("not done after %v", limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		tb.Errorf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, kinesisload.ErrClosed) {
		tb.Errorf("Run: %v, want ErrClosed", err)
	}
	return elapsed
}

// memPeak samples the Go heap (HeapInuse) every 20 ms and resets the
// kernel's peak resident set size (VmHWM) when it starts, so that one
// phase of a benchmark can be measured on its own.
type memPeak struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	peakHeap atomic.Uint64
	resetHWM bool
}

func startMemPeak() *memPeak {
	runtime.GC()
	m := &memPeak{stop: make(chan struct{})}
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
	m.resetHWM = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	m.wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > m.peakHeap.Load() {
				m.peakHeap.Store(ms.HeapInuse)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	})
	return m
}

// end stops sampling and returns the peak Go heap in use and the peak RSS
// (VmHWM, -1 if unknown or if it could not be reset), in MiB.
func (m *memPeak) end() (heapMiB, hwmMiB float64) {
	close(m.stop)
	m.wg.Wait()
	hwmMiB = -1
	if kb, ok := procStatusKB("VmHWM"); ok && m.resetHWM {
		hwmMiB = float64(kb) / 1024
	}
	return float64(m.peakHeap.Load()) / (1 << 20), hwmMiB
}

// procStatusKB reads a "kB" field of /proc/self/status.
func procStatusKB(field string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return v, err == nil
	}
	return 0, false
}

// quiet discards the Loader's logs.
func quiet() kinesisload.Option {
	return kinesisload.WithLogger(slog.New(slog.DiscardHandler))
}

// countingClient counts the GetShardIterator and GetRecords calls made
// through it (failed ones included) and the bytes GetRecords returned.
type countingClient struct {
	scan.Client
	calls atomic.Int64
	bytes atomic.Int64
}

func (c *countingClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.calls.Add(1)
	return c.Client.GetShardIterator(ctx, in, optFns...)
}

func (c *countingClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.calls.Add(1)
	out, err := c.Client.GetRecords(ctx, in, optFns...)
	if err == nil {
		var n int64
		for _, r := range out.Records {
			n += int64(len(r.Data) + len(aws.ToString(r.PartitionKey)))
		}
		c.bytes.Add(n)
	}
	return out, err
}
