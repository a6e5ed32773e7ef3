package scan_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// world is a fake Kinesis on a manual clock.
type world struct {
	clock *kinesistest.ManualClock
	fake  *kinesistest.Fake
}

func newWorld(t testing.TB, opts ...kinesistest.Option) *world {
	t.Helper()
	clk := kinesistest.NewManualClock(epoch)
	opts = append([]kinesistest.Option{kinesistest.WithClock(clk), kinesistest.WithoutLimits(), kinesistest.WithRetention(7 * 24 * time.Hour)}, opts...)
	return &world{clock: clk, fake: kinesistest.New(opts...)}
}

// testConfig returns a config whose sleeps advance the manual clock (and
// take no real time) and whose clock is the fake's, shifted by skew.
func (w *world) testConfig(strategy scan.Strategy, skew time.Duration) scan.Config {
	return scan.Config{
		Strategy: strategy,
		Now:      func() time.Time { return w.clock.Now().Add(skew) },
		Sleep: func(ctx context.Context, d time.Duration) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			w.clock.Advance(d)
			return nil
		},
	}
}

// shardIDs lists the shards of a stream.
func shardIDs(t testing.TB, api kinesistest.API, stream string) []string {
	t.Helper()
	out, err := api.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("ListShards %s: %v", stream, err)
	}
	var ids []string
	for _, s := range out.Shards {
		ids = append(ids, aws.ToString(s.ShardId))
	}
	return ids
}

// hashKeyOf returns a hash key inside shard's range.
func hashKeyOf(t testing.TB, api kinesistest.API, stream, shard string) string {
	t.Helper()
	out, err := api.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("ListShards %s: %v", stream, err)
	}
	for _, s := range out.Shards {
		if aws.ToString(s.ShardId) == shard {
			return aws.ToString(s.HashKeyRange.StartingHashKey)
		}
	}
	t.Fatalf("stream %s has no shard %s", stream, shard)
	return ""
}

// putN writes n records of size bytes to one shard, in PutRecords batches,
// calling between(i) before the record i is written (to advance a clock),
// and returns the last sequence number.
func putN(t testing.TB, api kinesistest.API, stream, shard string, n, size int, between func(i int)) string {
	t.Helper()
	seqs := putSeqs(t, api, stream, shard, n, size, between)
	if len(seqs) == 0 {
		return ""
	}
	return seqs[len(seqs)-1]
}

// putSeqs is putN returning every sequence number.
func putSeqs(t testing.TB, api kinesistest.API, stream, shard string, n, size int, between func(i int)) []string {
	t.Helper()
	key := hashKeyOf(t, api, stream, shard)
	data := make([]byte, size)
	var seqs []string
	batch := make([]types.PutRecordsRequestEntry, 0, 500)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		out, err := api.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch})
		if err != nil {
			t.Fatalf("PutRecords %s/%s: %v", stream, shard, err)
		}
		if aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("PutRecords %s/%s: %d records failed: %s", stream, shard, aws.ToInt32(out.FailedRecordCount), aws.ToString(out.Records[0].ErrorMessage))
		}
		for _, r := range out.Records {
			if aws.ToString(r.ShardId) != shard {
				t.Fatalf("record went to %s, not %s", aws.ToString(r.ShardId), shard)
			}
		}
		for _, r := range out.Records {
			seqs = append(seqs, aws.ToString(r.SequenceNumber))
		}
		batch = batch[:0]
	}
	for i := range n {
		if between != nil {
			flush()
			between(i)
		}
		batch = append(batch, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(key)})
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	return seqs
}

// every returns a between func that advances the clock by d before every
// record but the first.
func (w *world) every(d time.Duration) func(int) {
	return func(i int) {
		if i > 0 {
			w.clock.Advance(d)
		}
	}
}

func newResolver(t testing.TB, cfg scan.Config) *scan.Resolver {
	t.Helper()
	r, err := scan.NewResolver(cfg)
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	return r
}

// positions returns the positions of results by shard.
func positions(res []scan.ShardResult) map[string]string {
	m := make(map[string]string, len(res))
	for _, r := range res {
		m[r.Shard] = r.Position.String()
	}
	return m
}

func after(seq string) string { return scan.AfterSequence(seq).String() }

var trimHorizon = scan.TrimHorizon().String()

// recorder wraps a Client and records every call, and can replace results.
type recorder struct {
	scan.Client
	mu    sync.Mutex
	iters []*kinesis.GetShardIteratorInput
	calls int // GetShardIterator and GetRecords calls
	// withSDKRetries counts calls whose options left the SDK's retryer on.
	withSDKRetries int

	// emptyEvery, if > 0, makes every emptyEvery-th GetRecords call
	// return an empty page that is behind the tip and repeats its iterator,
	// as Kinesis does in the middle of a shard.
	emptyEvery int
	getCalls   int
	empties    atomic.Int64

	// zeroBehind makes every page report MillisBehindLatest 0, as some
	// implementations do too early.
	zeroBehind bool

	// panicOn, if set, makes calls on that shard panic.
	panicOn string

	// inFlight counts calls that have not returned.
	inFlight atomic.Int64
}

func (c *recorder) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	c.mu.Lock()
	cp := *in
	c.iters = append(c.iters, &cp)
	c.countCall(optFns)
	c.mu.Unlock()
	if c.panicOn != "" && aws.ToString(in.ShardId) == c.panicOn {
		panic(fmt.Sprintf("injected panic on %s", c.panicOn))
	}
	return c.Client.GetShardIterator(ctx, in, optFns...)
}

func (c *recorder) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	c.mu.Lock()
	c.countCall(optFns)
	c.getCalls++
	empty := c.emptyEvery > 0 && c.getCalls%c.emptyEvery == 0
	c.mu.Unlock()
	if empty {
		c.empties.Add(1)
		return &kinesis.GetRecordsOutput{MillisBehindLatest: aws.Int64(1000), NextShardIterator: in.ShardIterator}, nil
	}
	out, err := c.Client.GetRecords(ctx, in, optFns...)
	if err == nil && c.zeroBehind {
		out.MillisBehindLatest = aws.Int64(0)
	}
	return out, err
}

func (c *recorder) countCall(optFns []func(*kinesis.Options)) {
	c.calls++
	var o kinesis.Options
	for _, f := range optFns {
		f(&o)
	}
	if _, nop := o.Retryer.(aws.NopRetryer); !nop {
		c.withSDKRetries++
	}
}

// iteratorTypes returns the types and start positions of the iterators
// requested so far, as "TYPE" or "TYPE:seq".
func (c *recorder) iteratorTypes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, in := range c.iters {
		s := string(in.ShardIteratorType)
		if in.StartingSequenceNumber != nil {
			s += ":" + *in.StartingSequenceNumber
		}
		out = append(out, s)
	}
	return out
}
