package scan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// arrival is a record put on the fake and the time it arrived.
type arrival struct {
	seq string
	at  time.Time
}

// putAt writes n records to shard0, advancing the clock by gap before each
// but the first, and returns them with their arrival times.
func (w *world) putAt(t testing.TB, stream string, n int, gap time.Duration) []arrival {
	t.Helper()
	key := hashKeyOf(t, w.fake, stream, shard0)
	var out []arrival
	for i := range n {
		if i > 0 {
			w.clock.Advance(gap)
		}
		r, err := w.fake.PutRecord(context.Background(), &kinesis.PutRecordInput{
			StreamName: aws.String(stream), Data: []byte("x"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(key)})
		if err != nil {
			t.Fatalf("PutRecord: %v", err)
		}
		out = append(out, arrival{seq: aws.ToString(r.SequenceNumber), at: w.clock.Now()})
	}
	return out
}

// wantAt is the definition of a start at T0: just after the last record
// that arrived before t0 (to the millisecond), or TRIM_HORIZON.
func wantAt(recs []arrival, t0 time.Time) string {
	want := trimHorizon
	for _, r := range recs {
		if r.at.Truncate(time.Millisecond).Before(t0.Truncate(time.Millisecond)) {
			want = after(r.seq)
		}
	}
	return want
}

// silentPastLast models kinesalite: an AT_TIMESTAMP GetShardIterator with
// no record at or after its time is never answered (the request stays open
// until the caller gives up). Every other call is answered.
type silentPastLast struct {
	scan.Client
	silenced atomic.Int64
}

func (c *silentPastLast) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := c.Client.GetShardIterator(ctx, in, optFns...)
	if err != nil || in.ShardIteratorType != types.ShardIteratorTypeAtTimestamp {
		return out, err
	}
	page, err := c.Client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: out.ShardIterator, Limit: aws.Int32(1)})
	if err != nil {
		return nil, err
	}
	if len(page.Records) == 0 {
		c.silenced.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return out, nil
}

// TestResolveAtT0MatchesDefinition builds random shards and a random T0
// (before, at, between and after the records, and from Resolver.Now), puts
// more records after T0 before the scan runs (as during a slow start-up),
// and checks that both strategies persist exactly "just after the last
// record that arrived before T0", with the host clock ahead of and behind
// Kinesis's, with records sharing a millisecond, on an endpoint that leaves
// probes past the last record unanswered (kinesalite), with empty pages and
// a MillisBehindLatest of 0 reported too early.
func TestResolveAtT0MatchesDefinition(t *testing.T) {
	const cases = 200
	gaps := []time.Duration{0, 0, time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond, 3 * time.Second, 5 * time.Minute, 9 * time.Hour}
	skews := []time.Duration{0, -time.Second, 40 * time.Millisecond, time.Hour, -3 * time.Hour}
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 0x7430))
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		w.clock.Advance(time.Duration(rng.IntN(1000))*time.Hour + time.Duration(rng.IntN(1000))*time.Millisecond)

		var recs []arrival
		for range rng.IntN(4) {
			w.clock.Advance(gaps[rng.IntN(len(gaps))])
			// Gaps between records up to 5 min, so nothing expires
			// (7 days) and the definition needs no retention.
			recs = append(recs, w.putAt(t, "s", rng.IntN(200), gaps[rng.IntN(len(gaps)-1)])...)
		}
		w.clock.Advance(gaps[rng.IntN(len(gaps))])
		skew := skews[rng.IntN(len(skews))]

		// T0: now, Resolver.Now, a record's own arrival time (records of
		// that millisecond are after it), or a time between records.
		var t0 time.Time
		how := rng.IntN(4)
		switch {
		case how == 0 || len(recs) == 0:
			t0 = w.clock.Now()
		case how == 1:
			var err error
			if t0, err = newResolver(t, w.testConfig(scan.StrategyProbe, skew)).Now(context.Background(), w.fake, "s"); err != nil {
				t.Fatalf("seed %d: Now: %v", seed, err)
			}
			if now := w.clock.Now(); t0.After(now) || now.Sub(t0) > time.Second {
				t.Fatalf("seed %d: Now = %v, Kinesis's clock %v: want at most 1 s earlier, never later", seed, t0, now)
			}
		case how == 2:
			t0 = recs[rng.IntN(len(recs))].at
		default:
			t0 = recs[rng.IntN(len(recs))].at.Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		want := wantAt(recs, t0)

		// Records that arrive after T0, while the start-up resolves.
		if rng.IntN(2) == 0 {
			w.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			w.putAt(t, "s", 1+rng.IntN(150), gaps[rng.IntN(3)])
		}
		w.clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)

		cfg := w.testConfig(scan.StrategyProbe, skew)
		cfg.PageLimit = []int32{1, 2, 3, 7, 50, 10000}[rng.IntN(6)]
		cfg.Resolution = []time.Duration{time.Millisecond, 5 * time.Millisecond, 100 * time.Millisecond, time.Second}[rng.IntN(4)]
		cfg.HeadLimit = []int32{1, 4, 100}[rng.IntN(3)]
		cfg.InitialWindow = []time.Duration{time.Millisecond, time.Second, time.Minute}[rng.IntN(3)]
		var c scan.Client = w.fake
		silent := rng.IntN(3) == 0
		if silent {
			cfg.ProbeTimeout = 5 * time.Millisecond
			c = &silentPastLast{Client: c}
		}
		rec := &recorder{Client: c, zeroBehind: rng.IntN(4) == 0}
		if rng.IntN(3) == 0 {
			rec.emptyEvery = 2 + rng.IntN(3)
		}
		desc := fmt.Sprintf("seed %d (T0 kind %d, %d records, skew %v, silent %v, limit %d, head %d, resolution %v, window %v, empty every %d, zero behind %v)",
			seed, how, len(recs), skew, silent, cfg.PageLimit, cfg.HeadLimit, cfg.Resolution, cfg.InitialWindow, rec.emptyEvery, rec.zeroBehind)
		for _, st := range strategies {
			cfg.Strategy = st
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: rec, Stream: "s", Shards: []string{shard0}, At: t0})
			if err != nil {
				t.Fatalf("%s: %s: %v", desc, st, err)
			}
			if got := res[0].Position.String(); got != want {
				t.Errorf("%s: %s resolved %s, want %s", desc, st, got, want)
			}
		}
	}
}

// TestResolveAtT0Retried resolves a batch at T0, lets records arrive, and
// resolves it again at the same T0 (a retried start-up): the positions are
// the same, and none of the new records is before them.
func TestResolveAtT0Retried(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			before := w.putAt(t, "s", 500, 3*time.Millisecond)
			w.clock.Advance(2 * time.Second)
			t0, err := newResolver(t, w.testConfig(st, 0)).Now(context.Background(), w.fake, "s")
			if err != nil {
				t.Fatal(err)
			}
			cfg := w.testConfig(st, 0)
			req := scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}, At: t0}
			first, err := newResolver(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			w.clock.Advance(time.Second)
			w.putAt(t, "s", 300, time.Millisecond)
			w.clock.Advance(time.Minute)
			again, err := newResolver(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want := after(before[len(before)-1].seq)
			if a, b := first[0].Position.String(), again[0].Position.String(); a != want || b != want {
				t.Errorf("first %s, retried %s, want both %s", a, b, want)
			}
			// Without T0, the retry moves past the new records: the
			// meaning the zero At keeps.
			req.At = time.Time{}
			later, err := newResolver(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if later[0].Position.String() == want {
				t.Errorf("without At the tip did not move; the test proves nothing")
			}
		})
	}
}

// noDate passes no server time on, like a Client that builds its own
// outputs.
type noDate struct{ scan.Client }

func (c noDate) ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	out, err := c.Client.ListShards(ctx, in, optFns...)
	if out != nil {
		out.ResultMetadata = middleware.Metadata{}
	}
	return out, err
}

// TestResolverNowIsKinesisClock: Now takes Kinesis's clock from the
// answer's server time, whatever this host's clock says (ahead or behind),
// floored like an HTTP Date; without a server time, this host's clock minus
// HostClockBound.
func TestResolverNowIsKinesisClock(t *testing.T) {
	for _, skew := range []time.Duration{-6 * time.Hour, -time.Second, 0, 700 * time.Millisecond, 6 * time.Hour} {
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		w.clock.Advance(1234 * time.Millisecond)
		r := newResolver(t, w.testConfig(scan.StrategyProbe, skew))
		got, err := r.Now(context.Background(), w.fake, "s")
		if err != nil {
			t.Fatal(err)
		}
		if want := w.clock.Now().Truncate(time.Second); !got.Equal(want) {
			t.Errorf("skew %v: Now = %v, want %v (the fake's clock as a Date)", skew, got, want)
		}
		got, err = r.Now(context.Background(), noDate{w.fake}, "s")
		if err != nil {
			t.Fatal(err)
		}
		if want := w.clock.Now().Add(skew - scan.HostClockBound); !got.Equal(want) {
			t.Errorf("skew %v, no server time: Now = %v, want %v", skew, got, want)
		}
	}
	if _, err := newResolver(t, scan.Config{}).Now(context.Background(), nil, "s"); !errors.Is(err, scan.ErrInvalidRequest) {
		t.Errorf("Now with a nil client: %v, want ErrInvalidRequest", err)
	}
}

// TestProbeUnansweredPastLastRecord: on an endpoint that never answers an
// AT_TIMESTAMP probe past the last record (kinesalite), the probe strategy
// still finds the right position, by probes: it reads a small part of the
// shard, not the whole of it.
func TestProbeUnansweredPastLastRecord(t *testing.T) {
	for _, at := range []bool{true, false} {
		t.Run(fmt.Sprintf("At %v", at), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			recs := w.putAt(t, "s", 30000, 100*time.Microsecond)
			w.clock.Advance(3 * time.Second)
			cfg := w.testConfig(scan.StrategyProbe, 0)
			cfg.ProbeTimeout = 5 * time.Millisecond
			req := scan.Request{Client: &silentPastLast{Client: w.fake}, Stream: "s", Shards: []string{shard0}}
			if at {
				req.At = w.clock.Now()
			}
			res, err := newResolver(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got, want := res[0].Position.String(), after(recs[len(recs)-1].seq); got != want {
				t.Errorf("position %s, want %s", got, want)
			}
			st := res[0].Stats
			if st.Unanswered == 0 {
				t.Errorf("no probe went unanswered; the test proves nothing")
			}
			if st.Records > 3000 {
				t.Errorf("read %d of 30000 records: the shard was scanned, not probed", st.Records)
			}
		})
	}
}

// outage leaves every GetShardIterator unanswered while down is set.
type outage struct {
	scan.Client
	down  atomic.Bool
	after atomic.Int64 // AT_TIMESTAMP requests still answered before going down
}

func (c *outage) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if in.ShardIteratorType == types.ShardIteratorTypeAtTimestamp && c.after.Add(-1) == -1 {
		c.down.Store(true)
	}
	if c.down.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Client.GetShardIterator(ctx, in, optFns...)
}

// TestProbeOutageIsNotAFullScan: when the endpoint stops answering in the
// middle of the probes (every call, controls included), the probe is
// retried like any timeout; it is never taken for "nothing there" and the
// shard is never read from its start instead. With the retries used up the
// batch fails (the caller retries it); when the endpoint comes back in time
// the probe resumes and the position is right.
func TestProbeOutageIsNotAFullScan(t *testing.T) {
	for _, recovers := range []bool{false, true} {
		t.Run(fmt.Sprintf("recovers %v", recovers), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			recs := w.putAt(t, "s", 5000, 10*time.Millisecond)
			w.clock.Advance(time.Minute)
			cfg := w.testConfig(scan.StrategyProbe, 0)
			cfg.ProbeTimeout = 5 * time.Millisecond
			cfg.CallTimeout = 20 * time.Millisecond
			cfg.Retries = 2
			c := &outage{Client: w.fake}
			c.after.Store(3)
			if recovers {
				sleep := cfg.Sleep
				cfg.Sleep = func(ctx context.Context, d time.Duration) error {
					if d > scan.DefaultCallInterval { // a backoff, not a pacing wait
						c.down.Store(false) // back after the first backoff
					}
					return sleep(ctx, d)
				}
			}
			before, _ := w.fake.Stats("s", shard0)
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}, At: w.clock.Now()})
			stats, _ := w.fake.Stats("s", shard0)
			if read := stats.RecordsRead - before.RecordsRead; read > 500 {
				t.Errorf("read %d of 5000 records during an outage: a full scan", read)
			}
			if !recovers {
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Resolve: %v, want the probe's timeout", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got, want := res[0].Position.String(), after(recs[len(recs)-1].seq); got != want {
				t.Errorf("position %s, want %s", got, want)
			}
			if res[0].Stats.Unanswered != 0 {
				t.Errorf("Unanswered = %d: an outage was taken for a silent endpoint", res[0].Stats.Unanswered)
			}
		})
	}
}
