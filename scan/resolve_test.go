package scan_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

const shard0 = "shardId-000000000000"

var strategies = []scan.Strategy{scan.StrategyProbe, scan.StrategyFullScan}

// tipCases set up one shard (shard0 of stream "s") and return the position
// a resolver must find: the last record, or TRIM_HORIZON.
var tipCases = []struct {
	name  string
	setup func(t *testing.T, w *world) string
}{
	{"empty shard", func(t *testing.T, w *world) string {
		return trimHorizon
	}},
	{"one record", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 1, 10, nil))
	}},
	{"tip in the first page", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 5, 10, w.every(time.Millisecond)))
	}},
	{"tip in the middle of the third page", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 25, 10, w.every(time.Millisecond)))
	}},
	{"tip at the end of a full page", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 30, 10, w.every(time.Millisecond)))
	}},
	{"a thousand records 10 ms apart", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 1000, 10, w.every(10*time.Millisecond)))
	}},
	{"a long gap in the middle", func(t *testing.T, w *world) string {
		putN(t, w.fake, "s", shard0, 50, 10, w.every(time.Second))
		w.clock.Advance(10 * time.Hour)
		return after(putN(t, w.fake, "s", shard0, 50, 10, w.every(time.Second)))
	}},
	{"idle for a day and a half", func(t *testing.T, w *world) string {
		seq := putN(t, w.fake, "s", shard0, 50, 10, w.every(time.Second))
		w.clock.Advance(36 * time.Hour)
		return after(seq)
	}},
	{"every record shares one timestamp", func(t *testing.T, w *world) string {
		return after(putN(t, w.fake, "s", shard0, 100, 10, nil))
	}},
	{"the last records share one timestamp", func(t *testing.T, w *world) string {
		putN(t, w.fake, "s", shard0, 50, 10, w.every(time.Second))
		w.clock.Advance(time.Second)
		seq := putN(t, w.fake, "s", shard0, 50, 10, nil)
		w.clock.Advance(time.Minute)
		return after(seq)
	}},
	{"written this millisecond", func(t *testing.T, w *world) string {
		putN(t, w.fake, "s", shard0, 50, 10, w.every(time.Second))
		return after(putN(t, w.fake, "s", shard0, 5, 10, nil))
	}},
	{"every record expired", func(t *testing.T, w *world) string {
		putN(t, w.fake, "s", shard0, 20, 10, w.every(time.Minute))
		w.clock.Advance(8 * 24 * time.Hour)
		return trimHorizon
	}},
	{"older records expired", func(t *testing.T, w *world) string {
		putN(t, w.fake, "s", shard0, 20, 10, w.every(time.Minute))
		w.clock.Advance(6 * 24 * time.Hour)
		seq := putN(t, w.fake, "s", shard0, 20, 10, w.every(time.Minute))
		w.clock.Advance(36 * time.Hour)
		return after(seq)
	}},
	{"closed shard", func(t *testing.T, w *world) string {
		seq := putN(t, w.fake, "s", shard0, 40, 10, w.every(time.Second))
		w.clock.Advance(time.Second)
		split(t, w.fake, "s", shard0)
		// Later records go to the children, not to the closed parent.
		w.clock.Advance(time.Second)
		putN(t, w.fake, "s", "shardId-000000000001", 10, 10, w.every(time.Second))
		return after(seq)
	}},
	{"closed empty shard", func(t *testing.T, w *world) string {
		split(t, w.fake, "s", shard0)
		w.clock.Advance(time.Second)
		putN(t, w.fake, "s", "shardId-000000000002", 10, 10, w.every(time.Second))
		return trimHorizon
	}},
}

// split splits shard in two halves of its hash-key range.
func split(t *testing.T, api kinesistest.API, stream, shard string) {
	t.Helper()
	_, err := api.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName:         aws.String(stream),
		ShardToSplit:       aws.String(shard),
		NewStartingHashKey: aws.String("170141183460469231731687303715884105728"),
	})
	if err != nil {
		t.Fatalf("SplitShard %s: %v", shard, err)
	}
}

func TestResolveFindsTheTip(t *testing.T) {
	for _, tc := range tipCases {
		for _, st := range strategies {
			for _, limit := range []int32{1, 10, 10000} {
				t.Run(tc.name+"/"+st.String()+"/limit="+strconv.Itoa(int(limit)), func(t *testing.T) {
					w := newWorld(t)
					kinesistest.NewStream(t, w.fake, "s", 1)
					w.clock.Advance(time.Hour)
					want := tc.setup(t, w)
					cfg := w.testConfig(st, 0)
					cfg.PageLimit = limit
					cfg.HeadLimit = limit
					res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
					if err != nil {
						t.Fatalf("Resolve: %v", err)
					}
					if diff := cmp.Diff(map[string]string{shard0: want}, positions(res)); diff != "" {
						t.Errorf("positions (-want +got):\n%s", diff)
					}
					if res[0].Stats.Calls == 0 {
						t.Errorf("Stats.Calls = 0, want the calls counted")
					}
				})
			}
		}
	}
}

// TestProbeSmallShardInOneRead checks that a shard holding fewer than
// HeadLimit records costs the probe strategy what it costs the full scan.
func TestProbeSmallShardInOneRead(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	want := putN(t, w.fake, "s", shard0, 99, 10, w.every(time.Second))
	w.clock.Advance(time.Hour)
	res, err := newResolver(t, w.testConfig(scan.StrategyProbe, 0)).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	got := res[0]
	got.Stats.Duration = 0
	if diff := cmp.Diff(scan.ShardResult{Shard: shard0, Position: scan.AfterSequence(want), Stats: scan.Stats{Calls: 2, Probes: 1, Records: 99, Bytes: 99 * 11}}, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

// TestResolveStats checks that the reported cost is what the fake served.
func TestResolveStats(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			putN(t, w.fake, "s", shard0, 3000, 20, w.every(3*time.Millisecond))
			w.clock.Advance(time.Minute)
			res, err := newResolver(t, w.testConfig(st, 0)).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			fs, err := w.fake.Stats("s", shard0)
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Stats
			want := scan.Stats{
				Calls:   int(fs.GetRecordsCalls + fs.GetShardIteratorCalls),
				Records: int(fs.RecordsRead),
				Bytes:   fs.BytesRead,
				Probes:  got.Probes,
			}
			got.Duration = 0
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
			if st == scan.StrategyFullScan && (got.Records != 3000 || got.Probes != 0) {
				t.Errorf("full scan read %d records with %d probes, want 3000 and 0", got.Records, got.Probes)
			}
		})
	}
}

// TestProbeReadsLogarithmically checks the point of the probe strategy: it
// reads a few records, not the history, and its calls grow with the
// logarithm of the history.
func TestProbeReadsLogarithmically(t *testing.T) {
	calls := map[int]int{}
	for _, n := range []int{1000, 32000} {
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		want := putN(t, w.fake, "s", shard0, n, 10, w.every(10*time.Millisecond))
		w.clock.Advance(10 * time.Minute)
		cfg := w.testConfig(scan.StrategyProbe, 0)
		cfg.HeadLimit = 1
		res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if got := res[0].Position.String(); got != after(want) {
			t.Fatalf("%d records: position %s, want %s", n, got, after(want))
		}
		st := res[0].Stats
		// Probes read one record each; the final read holds the records
		// of one 100 ms resolution window (10 at one per 10 ms).
		if max := st.Probes + 11; st.Records > max {
			t.Errorf("%d records: read %d records with %d probes, want at most %d", n, st.Records, st.Probes, max)
		}
		calls[n] = st.Calls
	}
	// 32 times the history: log2(32) = 5 more bisection probes, each one
	// iterator and one page.
	if calls[32000] > calls[1000]+12 {
		t.Errorf("calls: %d for 1,000 records, %d for 32,000; want at most 12 more", calls[1000], calls[32000])
	}
}

// TestResolveEmptyPagesInTheMiddle serves an empty page that is behind the
// tip on every third GetRecords call, as Kinesis does; neither strategy may
// take it for the tip.
func TestResolveEmptyPagesInTheMiddle(t *testing.T) {
	for _, st := range strategies {
		for _, every := range []int{2, 3} {
			t.Run(st.String()+"/every="+strconv.Itoa(every), func(t *testing.T) {
				w := newWorld(t)
				kinesistest.NewStream(t, w.fake, "s", 1)
				putN(t, w.fake, "s", shard0, 30, 10, w.every(time.Second))
				w.clock.Advance(time.Hour)
				want := putN(t, w.fake, "s", shard0, 30, 10, w.every(time.Second))
				w.clock.Advance(time.Minute)
				c := &recorder{Client: w.fake, emptyEvery: every}
				cfg := w.testConfig(st, 0)
				cfg.PageLimit = 7
				cfg.HeadLimit = 1
				res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if diff := cmp.Diff(map[string]string{shard0: after(want)}, positions(res)); diff != "" {
					t.Errorf("positions (-want +got):\n%s", diff)
				}
				if c.empties.Load() == 0 {
					t.Errorf("no empty page was served; the test proves nothing")
				}
			})
		}
	}
}

// TestResolveZeroBehindTooEarly serves pages that all report
// MillisBehindLatest 0: a full page must still mean "keep reading".
func TestResolveZeroBehindTooEarly(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			want := putN(t, w.fake, "s", shard0, 95, 10, w.every(time.Millisecond))
			w.clock.Advance(time.Minute)
			cfg := w.testConfig(st, 0)
			cfg.PageLimit = 10
			cfg.Resolution = time.Second
			c := &recorder{Client: w.fake, zeroBehind: true}
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(map[string]string{shard0: after(want)}, positions(res)); diff != "" {
				t.Errorf("positions (-want +got):\n%s", diff)
			}
			if res[0].Stats.Records < 20 {
				t.Errorf("read %d records; the final read should span several full pages", res[0].Stats.Records)
			}
		})
	}
}

// TestResolveClockSkew gives the resolver a clock that differs from
// Kinesis's; the result must not change, and the cost must stay small.
func TestResolveClockSkew(t *testing.T) {
	skews := []time.Duration{-48 * time.Hour, -time.Hour, -10 * time.Second, -time.Millisecond, 0, time.Millisecond, 10 * time.Second, time.Hour, 48 * time.Hour}
	idles := []time.Duration{0, 50 * time.Millisecond, 5 * time.Second, 3 * time.Hour}
	for _, skew := range skews {
		for _, idle := range idles {
			t.Run("skew="+skew.String()+"/idle="+idle.String(), func(t *testing.T) {
				w := newWorld(t)
				kinesistest.NewStream(t, w.fake, "s", 1)
				putN(t, w.fake, "s", shard0, 500, 10, w.every(100*time.Millisecond))
				w.clock.Advance(20 * time.Hour)
				want := putN(t, w.fake, "s", shard0, 500, 10, w.every(10*time.Millisecond))
				w.clock.Advance(idle)
				cfg := w.testConfig(scan.StrategyProbe, skew)
				cfg.HeadLimit = 1
				res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if diff := cmp.Diff(map[string]string{shard0: after(want)}, positions(res)); diff != "" {
					t.Errorf("positions (-want +got):\n%s", diff)
				}
				if st := res[0].Stats; st.Records > 100 {
					t.Errorf("read %d records (%d probes), want at most 100", st.Records, st.Probes)
				}
			})
		}
	}
}

// TestResolveRecordsArriveDuringTheScan holds the Nth GetRecords call, for
// every N the scan makes, writes records meanwhile and releases it: the
// result is the tip including them.
func TestResolveRecordsArriveDuringTheScan(t *testing.T) {
	setup := func(t *testing.T, w *world) {
		putN(t, w.fake, "s", shard0, 200, 10, w.every(50*time.Millisecond))
		w.clock.Advance(time.Hour)
	}
	for _, st := range strategies {
		// A dry run counts the calls.
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		setup(t, w)
		cfg := w.testConfig(st, 0)
		cfg.PageLimit = 50
		if _, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}}); err != nil {
			t.Fatalf("dry run: %v", err)
		}
		total := w.fake.Calls(kinesistest.OpGetRecords)
		for n := 1; n <= total; n++ {
			t.Run(st.String()+"/call="+strconv.Itoa(n), func(t *testing.T) {
				w := newWorld(t)
				kinesistest.NewStream(t, w.fake, "s", 1)
				setup(t, w)
				entered, release := make(chan struct{}, 1), make(chan struct{})
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: n, Entered: entered, Block: release})
				cfg := w.testConfig(st, 0)
				cfg.PageLimit = 50
				type outcome struct {
					res []scan.ShardResult
					err error
				}
				done := make(chan outcome)
				go func() {
					res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
					done <- outcome{res, err}
				}()
				<-entered
				w.clock.Advance(3 * time.Second)
				want := putN(t, w.fake, "s", shard0, 120, 10, w.every(time.Millisecond))
				close(release)
				o := <-done
				if o.err != nil {
					t.Fatalf("Resolve: %v", o.err)
				}
				if diff := cmp.Diff(map[string]string{shard0: after(want)}, positions(o.res)); diff != "" {
					t.Errorf("positions (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestResolveManyShards(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 6)
			ids := shardIDs(t, w.fake, "s")
			want := map[string]string{}
			for i, id := range ids {
				if i == 0 {
					want[id] = trimHorizon
					continue
				}
				want[id] = after(putN(t, w.fake, "s", id, i*37, 10, w.every(time.Duration(i)*time.Millisecond)))
			}
			w.clock.Advance(time.Minute)
			res, err := newResolver(t, w.testConfig(st, 0)).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(want, positions(res)); diff != "" {
				t.Errorf("positions (-want +got):\n%s", diff)
			}
			var order []string
			for _, r := range res {
				order = append(order, r.Shard)
			}
			if diff := cmp.Diff(ids, order); diff != "" {
				t.Errorf("results are not in request order (-want +got):\n%s", diff)
			}
		})
	}
}

// refuseFuture refuses AT_TIMESTAMP iterators after the fake's clock, as
// Kinesis does, with the message msg. It passes no server time on, so the
// resolver's probe times come from the host's clock, which a test may set
// ahead.
type refuseFuture struct {
	scan.Client
	clock   *kinesistest.ManualClock
	msg     string
	refused int
}

func (c *refuseFuture) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if in.ShardIteratorType == types.ShardIteratorTypeAtTimestamp && in.Timestamp.After(c.clock.Now()) {
		c.refused++
		return nil, &types.InvalidArgumentException{Message: aws.String(c.msg)}
	}
	out, err := c.Client.GetShardIterator(ctx, in, optFns...)
	if out != nil {
		out.ResultMetadata = middleware.Metadata{}
	}
	return out, err
}

func (c *refuseFuture) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, optFns...)
	if out != nil {
		out.ResultMetadata = middleware.Metadata{}
	}
	return out, err
}

// TestResolveFutureTimestampRefused runs the probe strategy with a clock
// ahead of Kinesis against a Kinesis that refuses future timestamps, with the
// wording of AWS and of kinesis-mock: a refused probe means "no record
// after", and the result is unchanged. Any other InvalidArgumentException
// still fails the batch.
func TestResolveFutureTimestampRefused(t *testing.T) {
	for _, msg := range []string{
		"The timestampInMillis parameter cannot be greater than the currentTimestampInMillis. timestampInMillis: 1, currentTimestampInMillis: 0",
		"Timestamp cannot be in the future",
		"Some other argument is invalid",
	} {
		t.Run(msg, func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			want := putN(t, w.fake, "s", shard0, 300, 10, w.every(10*time.Millisecond))
			w.clock.Advance(time.Minute)
			c := &refuseFuture{Client: w.fake, clock: w.clock, msg: msg}
			cfg := w.testConfig(scan.StrategyProbe, time.Hour)
			cfg.HeadLimit = 1
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
			if strings.HasPrefix(msg, "Some other") {
				var iae *types.InvalidArgumentException
				if !errors.As(err, &iae) {
					t.Fatalf("Resolve: %v, want the InvalidArgumentException", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got := res[0].Position.String(); got != after(want) {
				t.Errorf("position %s, want %s", got, after(want))
			}
			if c.refused == 0 {
				t.Errorf("no probe was refused; the test proves nothing")
			}
		})
	}
}
