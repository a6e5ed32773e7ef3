package scan_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// counting wraps a Client and measures how many shards have a call in
// flight at once. Until `gate` shards are in flight together, every call
// waits: that proves the resolver reaches that concurrency. After that,
// calls go through.
type counting struct {
	scan.Client
	gate int

	mu       sync.Mutex
	byIter   map[string]string // iterator -> shard
	active   map[string]int    // shard -> calls in flight
	inFlight int               // shards with a call in flight
	max      int
	open     chan struct{}
	opened   bool
}

func newCounting(c scan.Client, gate int) *counting {
	return &counting{Client: c, gate: gate, byIter: map[string]string{}, active: map[string]int{}, open: make(chan struct{})}
}

func (c *counting) enter(ctx context.Context, shard string) error {
	c.mu.Lock()
	c.active[shard]++
	if c.active[shard] == 1 {
		c.inFlight++
		c.max = max(c.max, c.inFlight)
	}
	if !c.opened && c.inFlight >= c.gate {
		c.opened = true
		close(c.open)
	}
	c.mu.Unlock()
	select {
	case <-c.open:
		return nil
	case <-ctx.Done():
		c.leave(shard)
		return ctx.Err()
	}
}

func (c *counting) leave(shard string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active[shard]--
	if c.active[shard] == 0 {
		c.inFlight--
	}
}

func (c *counting) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	shard := aws.ToString(in.StreamName) + "/" + aws.ToString(in.ShardId)
	if err := c.enter(ctx, shard); err != nil {
		return nil, err
	}
	defer c.leave(shard)
	time.Sleep(50 * time.Microsecond) // let other scans overlap this call
	out, err := c.Client.GetShardIterator(ctx, in, optFns...)
	if err == nil {
		c.mu.Lock()
		c.byIter[aws.ToString(out.ShardIterator)] = shard
		c.mu.Unlock()
	}
	return out, err
}

func (c *counting) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.mu.Lock()
	shard, ok := c.byIter[aws.ToString(in.ShardIterator)]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("counting: unknown iterator")
	}
	if err := c.enter(ctx, shard); err != nil {
		return nil, err
	}
	defer c.leave(shard)
	time.Sleep(50 * time.Microsecond)
	out, err := c.Client.GetRecords(ctx, in, optFns...)
	if err == nil && out.NextShardIterator != nil {
		c.mu.Lock()
		c.byIter[*out.NextShardIterator] = shard
		c.mu.Unlock()
	}
	return out, err
}

// TestResolveWorkerBound runs three batches of 20 shards at once on one
// Resolver with 8 workers: the shards scanned at once reach 8 and never
// exceed it.
func TestResolveWorkerBound(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w := newWorld(t)
			want := map[string]map[string]string{}
			for b := range 3 {
				name := fmt.Sprintf("s%d", b)
				kinesistest.NewStream(t, w.fake, name, 20)
				want[name] = map[string]string{}
				for i, id := range shardIDs(t, w.fake, name) {
					want[name][id] = after(putN(t, w.fake, name, id, 5+i, 10, w.every(time.Millisecond)))
				}
			}
			w.clock.Advance(time.Minute)
			cfg := w.testConfig(st, 0)
			cfg.Workers = 8
			cfg.PageLimit = 3
			r := newResolver(t, cfg)
			c := newCounting(w.fake, 8)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := map[string]map[string]string{}
			ids := map[string][]string{}
			for name := range want {
				ids[name] = shardIDs(t, w.fake, name)
			}
			errs := make([]error, 3)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for b := range 3 {
				name := fmt.Sprintf("s%d", b)
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := r.Resolve(ctx, scan.Request{Client: c, Stream: name, Shards: ids[name]})
					errs[b] = err
					mu.Lock()
					got[name] = positions(res)
					mu.Unlock()
				}()
			}
			wg.Wait()
			for b, err := range errs {
				if err != nil {
					t.Fatalf("batch %d: %v", b, err)
				}
			}
			for name := range want {
				for id, pos := range want[name] {
					if got[name][id] != pos {
						t.Errorf("%s/%s: %s, want %s", name, id, got[name][id], pos)
					}
				}
			}
			if c.max != 8 {
				t.Errorf("at most %d shards were scanned at once, want exactly 8", c.max)
			}
		})
	}
}

// TestResolveBatchWorkers checks the bound with budgets other than the
// default.
func TestResolveBatchWorkers(t *testing.T) {
	for _, tc := range []struct{ shards, workers, want int }{{12, 4, 4}, {12, 1, 1}} {
		t.Run(fmt.Sprintf("%d shards, %d workers", tc.shards, tc.workers), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", tc.shards)
			ids := shardIDs(t, w.fake, "s")
			for _, id := range ids {
				putN(t, w.fake, "s", id, 3, 10, nil)
			}
			cfg := w.testConfig(scan.StrategyProbe, 0)
			cfg.Workers = tc.workers
			c := newCounting(w.fake, tc.want)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := newResolver(t, cfg).Resolve(ctx, scan.Request{Client: c, Stream: "s", Shards: ids}); err != nil {
				t.Fatal(err)
			}
			if c.max != tc.want {
				t.Errorf("at most %d shards at once, want %d", c.max, tc.want)
			}
		})
	}
}
