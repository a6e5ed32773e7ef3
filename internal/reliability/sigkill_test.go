package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/faultproxy"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// killFaults are the faults the proxy injects into every call of the
// loader once the first loader has initialised.
var killFaults = faultproxy.Rates{Reset: 0.04, ServerError: 0.04, Throttle: 0.06, Truncate: 0.04, Delay: 0.05}

// TestSIGKILLLoop runs a loader process against kinesis-local through the
// fault proxy, kills it with SIGKILL at random moments while records are
// written and shards split and merge, restarts it each time, and checks the
// guarantee on what its Sink wrote: every record written after the first
// initialisation delivered at least once, in shard order, children after
// parents, and no record of a committed batch delivered again.
func TestSIGKILLLoop(t *testing.T) { sigkillLoop(t, false) }

// TestSIGKILLLoopFanOut is TestSIGKILLLoop with loaders that read with
// enhanced fan-out: the kills land in subscriptions too, and the fault
// proxy resets, truncates, throttles and fails SubscribeToShard calls.
func TestSIGKILLLoopFanOut(t *testing.T) { sigkillLoop(t, true) }

func sigkillLoop(t *testing.T, fanOut bool) {
	kills := 10
	switch {
	case longForm():
		kills = 100
	case testing.Short() && fanOut:
		kills = 4 // each restart subscribes anew: a kill costs twice the polling one's time
	case testing.Short():
		kills = 6
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_RELIABILITY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIDEMARK_RELIABILITY_SEED=%q: %v", s, err)
		}
	}
	t.Logf("%d kills, seed %d (set TIDEMARK_RELIABILITY_SEED to repeat)", kills, seed)
	began := time.Now()

	emu := emulator.Start(t, emulator.KinesisLocal)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*10*time.Second+3*time.Minute)
	defer cancel()
	api := killloop.NewTestClient(t, emu.Endpoint) // the producer's and the checks': no faults
	const stream = "sigkill"
	killloop.CreateStream(ctx, t, api, stream, 2)
	history := make([]string, 10)
	for i := range history {
		history[i] = fmt.Sprintf("h-%03d", i)
	}
	if _, err := killloop.PutAll(ctx, api, stream, history); err != nil {
		t.Fatal(err)
	}
	// LATEST resolves at T0, Kinesis's Date (whole seconds, floored)
	// when the first start-up began: records of the second before it may
	// count as after it. Let the history be older than that.
	time.Sleep(2 * time.Second)

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
		RecordsPerCall:     100,
		FanOut:             fanOut,
	}
	loader := startLoader(t, cc)
	resolved, err := loader.waitInit(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.SetAll(killFaults); err != nil {
		t.Fatal(err)
	}
	prod := killloop.StartProducer(ctx, func(ctx context.Context, data []string) ([]written, error) {
		return killloop.PutAll(ctx, api, stream, data)
	})
	t.Cleanup(func() { cancel(); <-prod.Done() })

	rng := rand.New(rand.NewPCG(seed, seed+1))
	var (
		checkpoints []checkpoint
		reshards    []string
		earlyKills  int
	)
	reshardAt := map[int]func() string{}
	if kills >= 3 {
		// A reshard every kills/3 kills (every 10 from 30 kills on),
		// alternating split and merge: with -short, a split and a merge
		// (fan-out's 4 kills took three, and its drain then read seven
		// shards in three generations: 31-37 s of the default run).
		first, step := kills/3, kills/3
		if kills >= 30 {
			first, step = 10, 10
		}
		for i := first; i < kills && !(testing.Short() && len(reshardAt) == 2); i += step {
			if len(reshardAt)%2 == 0 {
				reshardAt[i] = func() string { return killloop.Split(ctx, t, api, stream) }
			} else {
				reshardAt[i] = func() string { return killloop.Merge(ctx, t, api, stream) }
			}
		}
	}
	loopStart := time.Now()
	for i := range kills {
		if f := reshardAt[i]; f != nil {
			reshards = append(reshards, fmt.Sprintf("before kill %d: %s", i+1, f()))
		}
		// One kill in five lands early: during start-up and initialisation.
		wait := 400*time.Millisecond + time.Duration(rng.Int64N(int64(1600*time.Millisecond)))
		if rng.IntN(5) == 0 {
			wait = time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
		}
		time.Sleep(wait)
		if loader.Exited() {
			t.Fatalf("kill %d: the loader exited by itself (%v):\n%s", i+1, loader.State(), loader.Stderr())
		}
		select {
		case <-loader.Lines():
		default:
			earlyKills++ // before its initialisation was journaled
		}
		loader.Kill()
		out, err := readOutput(cc.Out)
		if err != nil {
			t.Fatal(err)
		}
		checkpoints = append(checkpoints, checkpoint{kill: i + 1, lines: len(out), committed: committed(t, cc.Dir, stream)})
		// Every other loader snapshots its journal every 8 saves, so that
		// kills also land in snapshots and compactions.
		next := cc
		if i%2 == 0 {
			next.SnapshotEvery = 8
		}
		loader = startLoader(t, next)
	}
	loopTook := time.Since(loopStart)
	produced, perr := prod.Finish()
	if perr != nil {
		t.Fatalf("producer: %v", perr)
	}
	want := produced
	if len(want) == 0 {
		t.Fatal("the producer wrote nothing")
	}

	// The last loader drains the stream. It must have initialised before
	// it is stopped: SIGTERM before its handler is installed would kill it.
	drainStart := time.Now()
	if _, err := loader.waitInit(time.Minute); err != nil {
		t.Fatalf("the last loader: %v", err)
	}
	drain(t, loader, cc.Out, want, 2*time.Minute)
	drainTook := time.Since(drainStart)
	if code, err := loader.Term(30 * time.Second); err != nil || code != exitOK {
		t.Fatalf("the last loader: exit %d, %v:\n%s", code, err, loader.Stderr())
	}
	out, err := readOutput(cc.Out)
	if err != nil {
		t.Fatal(err)
	}
	final := committed(t, cc.Dir, stream)
	checkpoints = append(checkpoints, checkpoint{kill: kills + 1, lines: len(out), committed: final})
	lineage := killloop.ListShards(ctx, t, api, stream)

	// Nothing from before the first initialisation.
	where := map[string]written{}
	for _, w := range want {
		where[w.Data] = w
	}
	for i, l := range out {
		w, ok := where[l.data]
		switch {
		case !ok:
			t.Errorf("line %d: %q was delivered but not written after the first initialisation (%s %s)", i+1, l.data, l.shard, l.seq)
		case w.Shard != l.shard || w.Seq != l.seq:
			t.Errorf("line %d: %q delivered as %s %s, written as %s %s", i+1, l.data, l.shard, l.seq, w.Shard, w.Seq)
		}
		if p, err := scan.Parse(resolved[l.shard]); err == nil && killloop.Covers(p, l.seq) {
			t.Errorf("line %d: %s %s is at or before the shard's resolved start %v", i+1, l.shard, l.seq, p)
		}
	}

	// Shard order of first occurrences; duplicates counted.
	first := map[string]int{}
	occurrences := map[string]int{}
	lastSeq := map[string]string{}
	for i, l := range out {
		occurrences[l.data]++
		if _, ok := first[l.data]; ok {
			continue
		}
		first[l.data] = i
		if p := lastSeq[l.shard]; p != "" && scan.CompareSequence(l.seq, p) <= 0 {
			t.Errorf("line %d: shard %s: first delivery of %s (seq %s) after seq %s", i+1, l.shard, l.data, l.seq, p)
		}
		lastSeq[l.shard] = l.seq
	}
	dups, dupRecords := 0, 0
	for _, n := range occurrences {
		if n > 1 {
			dups += n - 1
			dupRecords++
		}
	}

	// Children after parents: every line of a parent comes before the
	// first line of its child.
	firstOf, lastOf := map[string]int{}, map[string]int{}
	for i, l := range out {
		if _, ok := firstOf[l.shard]; !ok {
			firstOf[l.shard] = i
		}
		lastOf[l.shard] = i
	}
	for _, s := range lineage {
		child := aws.ToString(s.ShardId)
		fc, ok := firstOf[child]
		if !ok {
			continue
		}
		for _, parent := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			if lp, ok := lastOf[aws.ToString(parent)]; ok && lp > fc {
				t.Errorf("parent %s has a record on line %d, after child %s's first record on line %d", aws.ToString(parent), lp+1, child, fc+1)
			}
		}
	}

	// Committed batches: each record at or before a committed position was
	// in the file when the loader died, and never appears again.
	checkCommitted(t, checkpoints, want, out)
	// A parent whose child was read is COMPLETED in the journal.
	for _, s := range lineage {
		child := aws.ToString(s.ShardId)
		if _, read := firstOf[child]; !read {
			continue
		}
		for _, parent := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			if id := aws.ToString(parent); id != "" && final[id].State != kinesisload.StateCompleted {
				t.Errorf("child %s was read but its parent %s is %v in the journal, want COMPLETED", child, id, final[id].State)
			}
		}
	}

	tot := proxy.Total()
	t.Logf("timings: total %v, kill loop %v (%d kills), drain %v", time.Since(began).Round(time.Millisecond), loopTook.Round(time.Millisecond), kills, drainTook.Round(time.Millisecond))
	t.Logf("records: %d written after initialisation, %d lines delivered, %d duplicate deliveries of %d records", len(want), len(out), dups, dupRecords)
	t.Logf("reshards: %v; shards at the end: %d", reshards, len(lineage))
	withCommits := 0
	for _, cp := range checkpoints[:kills] {
		for id, pr := range cp.committed {
			if pr.Position.Kind == scan.KindAfterSequence && pr.Position.String() != resolved[id] {
				withCommits++
				break
			}
		}
	}
	t.Logf("kills: %d before the loader's initialisation was journaled; %d after a record was committed", earlyKills, withCommits)
	if subs := proxy.Counts()["SubscribeToShard"].Requests; fanOut != (subs > 0) {
		t.Errorf("%d SubscribeToShard calls went through the proxy; fan-out mode: %v", subs, fanOut)
	}
	t.Logf("proxy: %d requests, injected %d resets, %d 5xx, %d throttles, %d truncations, %d delays",
		tot.Requests, tot.Reset, tot.ServerError, tot.Throttle, tot.Truncate, tot.Delay)
	if tot.Reset+tot.ServerError+tot.Throttle+tot.Truncate == 0 {
		t.Error("the proxy injected no fault: the run proves nothing about them")
	}
	if kills >= 10 && len(reshards) < 2 {
		t.Errorf("only %d reshards, want a split and a merge", len(reshards))
	}
}
