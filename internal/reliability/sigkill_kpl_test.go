package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// putAggregated writes data as KPL aggregates of up to 4 user records (each
// keyed by its data, so that the user records of one aggregate hash all
// over the stream, as with a stale producer), retrying what fails. Every
// user record is written with its aggregate's shard and sequence number.
func putAggregated(ctx context.Context, c *kinesis.Client, stream string, data []string) ([]written, error) {
	var groups [][]string
	for i := 0; i < len(data); i += 4 {
		groups = append(groups, data[i:min(i+4, len(data))])
	}
	var out []written
	var last error
	for attempt := 0; len(groups) > 0; attempt++ {
		if attempt > 50 {
			return out, fmt.Errorf("put %d aggregates to %s: still failing after 50 attempts: %v", len(groups), stream, last)
		}
		entries := make([]types.PutRecordsRequestEntry, len(groups))
		for i, g := range groups {
			users := make([]kinesistest.UserRecord, len(g))
			for j, d := range g {
				users[j] = kinesistest.UserRecord{PartitionKey: d, Data: []byte(d)}
			}
			e, err := kinesistest.Aggregate(users)
			if err != nil {
				return out, err
			}
			entries[i] = e
		}
		res, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			last = err
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var again [][]string
		for i, r := range res.Records {
			if r.ErrorCode != nil {
				last = fmt.Errorf("%s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				again = append(again, groups[i])
				continue
			}
			for _, d := range groups[i] {
				out = append(out, written{Shard: aws.ToString(r.ShardId), Seq: aws.ToString(r.SequenceNumber), Data: d})
			}
		}
		groups = again
	}
	return out, nil
}

// TestSIGKILLLoopAggregated is the kill loop with a KPL producer: a loader
// process reading aggregated records through the fault proxy is killed with
// SIGKILL at random moments and restarted. Every user record written after
// the first initialisation is delivered; every delivery of an aggregate is
// whole and in order (its user records contiguous, in the order written);
// and no user record of an aggregate committed before a kill is delivered
// again after it. Short: 6 kills, no reshards (TestSIGKILLLoop covers
// those); the long form makes 30.
func TestSIGKILLLoopAggregated(t *testing.T) {
	kills := 6
	if longForm() {
		kills = 30
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("%d kills, seed %d", kills, seed)

	emu := emulator.Start(t, emulator.KinesisLocal)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*10*time.Second+3*time.Minute)
	defer cancel()
	api := killloop.NewTestClient(t, emu.Endpoint)
	const stream = "sigkill-kpl"
	killloop.CreateStream(ctx, t, api, stream, 2)

	proxy := startKillProxy(t, emu.Endpoint, seed)
	tmp := t.TempDir()
	cc := childConfig{
		Endpoint:           proxy.URL(),
		Stream:             stream,
		Dir:                filepath.Join(tmp, "journal"),
		Out:                filepath.Join(tmp, "out.txt"),
		ListShardsInterval: 500 * time.Millisecond,
		IdleWait:           200 * time.Millisecond,
		CallTimeout:        5 * time.Second,
		RecordsPerCall:     3, // several pages per producer batch: kills land between aggregates
	}
	loader := startLoader(t, cc)
	if _, err := loader.waitInit(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := proxy.SetAll(killFaults); err != nil {
		t.Fatal(err)
	}
	prod := killloop.StartProducer(ctx, func(ctx context.Context, data []string) ([]written, error) {
		return putAggregated(ctx, api, stream, data)
	})
	t.Cleanup(func() { cancel(); <-prod.Done() })

	rng := rand.New(rand.NewPCG(seed, seed+1))
	var checkpoints []checkpoint
	for i := range kills {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
		if loader.Exited() {
			t.Fatalf("kill %d: the loader exited by itself (%v):\n%s", i+1, loader.State(), loader.Stderr())
		}
		loader.Kill()
		out, err := readOutput(cc.Out)
		if err != nil {
			t.Fatal(err)
		}
		checkpoints = append(checkpoints, checkpoint{kill: i + 1, lines: len(out), committed: committed(t, cc.Dir, stream)})
		loader = startLoader(t, cc)
	}
	produced, perr := prod.Finish()
	if perr != nil {
		t.Fatalf("producer: %v", perr)
	}
	want := produced
	if len(want) == 0 {
		t.Fatal("the producer wrote nothing")
	}
	if _, err := loader.waitInit(time.Minute); err != nil {
		t.Fatalf("the last loader: %v", err)
	}
	drain(t, loader, cc.Out, want, 2*time.Minute)
	if code, err := loader.Term(30 * time.Second); err != nil || code != exitOK {
		t.Fatalf("the last loader: exit %d, %v:\n%s", code, err, loader.Stderr())
	}
	out, err := readOutput(cc.Out)
	if err != nil {
		t.Fatal(err)
	}
	checkpoints = append(checkpoints, checkpoint{kill: kills + 1, lines: len(out), committed: committed(t, cc.Dir, stream)})

	// The user records of each aggregate, in the order written.
	aggOf := map[string][]string{} // shard/seq -> data
	where := map[string]written{}
	for _, w := range want {
		k := w.Shard + "/" + w.Seq
		aggOf[k] = append(aggOf[k], w.Data)
		where[w.Data] = w
	}
	// Every delivery of an aggregate is whole and in order.
	for i := 0; i < len(out); {
		l := out[i]
		w, ok := where[l.data]
		if !ok || w.Shard != l.shard || w.Seq != l.seq {
			t.Fatalf("line %d: %q delivered as %s %s, written as %+v", i+1, l.data, l.shard, l.seq, w)
		}
		agg := aggOf[l.shard+"/"+l.seq]
		for j, d := range agg {
			if i+j >= len(out) || out[i+j].data != d {
				t.Fatalf("line %d: the aggregate %s %s is not delivered whole and in order: want %q", i+1, l.shard, l.seq, agg)
			}
		}
		i += len(agg)
	}
	// Every user record of a committed aggregate was delivered before the
	// kill, and none is delivered after it.
	dups := 0
	checkCommitted(t, checkpoints, want, out)
	seen := map[string]int{}
	for _, l := range out {
		if seen[l.data]++; seen[l.data] > 1 {
			dups++
		}
	}
	t.Logf("%d user records in %d aggregates written; %d lines delivered, %d repeats of uncommitted aggregates", len(want), len(aggOf), len(out), dups)
}
