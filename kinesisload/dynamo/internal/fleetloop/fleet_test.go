package fleetloop

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/faultproxy"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
	"github.com/tidemark/tidemark/scan"
)

var long = flag.Bool("fleetloop.long", false, "run the long form of the fleet loop (150 kills instead of 30); also TIDEMARK_RELIABILITY=long")

func longForm() bool {
	return *long || os.Getenv("TIDEMARK_RELIABILITY") == "long"
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envHost); raw != "" {
		os.Exit(hostMain(raw))
	}
	goleak.VerifyTestMain(m)
}

// The faults the proxies inject once the fleet has initialised.
var (
	kinesisFaults = faultproxy.Rates{Reset: 0.03, ServerError: 0.03, Throttle: 0.05, Truncate: 0.03, Delay: 0.05}
	dynamoFaults  = faultproxy.Rates{Reset: 0.02, ServerError: 0.02, Throttle: 0.03, Truncate: 0.02, Delay: 0.05}
	// delaysOnly is the DynamoDB proxy's faults in the run with planned
	// moves only: no fault may cost a host its leases there.
	delaysOnly = faultproxy.Rates{Delay: 0.05}
)

// leaseDuration is the hosts' dynamo.Config.LeaseDuration.
const leaseDuration = 3 * time.Second

// fleet is one kinesis-local stream loaded by host processes whose dynamo
// Coordinators share a dynalite table, each emulator behind a fault proxy.
type fleet struct {
	t        *testing.T
	ctx      context.Context
	stream   string
	table    string
	dir      string
	api      *kinesis.Client     // the producer's and the checks': no faults
	inspect  *dynamo.Coordinator // the checks': no faults, never joins
	kproxy   *faultproxy.Proxy
	dproxy   *faultproxy.Proxy
	next     int
	running  map[string]*killloop.Proc
	hosts    []string            // every host ever started, in order
	killed   map[string]snapshot // by host
	stopped  map[string]bool     // hosts stopped with SIGTERM (planned)
	configOf map[string]hostConfig
}

// snapshot is the table's committed progress read right after a kill.
type snapshot struct {
	host      string
	killedAt  int64 // UnixNano
	readAt    int64 // UnixNano, after the read returned
	committed map[string]kinesisload.ShardProgress
}

func newFleet(t *testing.T, ctx context.Context, seed uint64, shards int32) *fleet {
	t.Helper()
	kin := emulator.Start(t, emulator.KinesisLocal)
	dyn := emulator.Start(t, emulator.Dynalite)
	f := &fleet{t: t, ctx: ctx, stream: "fleet", table: "fleetloop", dir: t.TempDir(),
		running: map[string]*killloop.Proc{}, killed: map[string]snapshot{}, stopped: map[string]bool{}, configOf: map[string]hostConfig{}}
	f.api = killloop.NewTestClient(t, kin.Endpoint)
	killloop.CreateStream(ctx, t, f.api, f.stream, shards)
	var err error
	if f.kproxy, err = faultproxy.New(faultproxy.Config{Upstream: kin.Endpoint, Seed: seed, MaxDelay: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kproxy.Close() })
	if f.dproxy, err = faultproxy.New(faultproxy.Config{Upstream: dyn.Endpoint, Seed: seed + 7, MaxDelay: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.dproxy.Close() })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	ddb := dynamodb.New(dynamodb.Options{
		Region:       emulator.Region,
		BaseEndpoint: aws.String(dyn.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	if f.inspect, err = dynamo.New(ddb, dynamo.Config{Table: f.table, HostID: "checker"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// start starts a new host process with a host ID of its own.
func (f *fleet) start() string {
	f.t.Helper()
	f.next++
	id := fmt.Sprintf("h%02d", f.next)
	hc := hostConfig{HostID: id, KinesisEndpoint: f.kproxy.URL(), DynamoEndpoint: f.dproxy.URL(), Table: f.table, Stream: f.stream,
		Out: filepath.Join(f.dir, id+".out"), LeaseDuration: leaseDuration, CallTimeout: 2 * time.Second}
	if f.next%2 == 0 {
		hc.Checkpoint = 500 * time.Millisecond // coalesced commits: a longer uncommitted window
	}
	raw, err := json.Marshal(hc)
	if err != nil {
		f.t.Fatal(err)
	}
	f.running[id] = killloop.Start(f.t, []string{envHost + "=" + string(raw)}, "HOST ")
	f.hosts = append(f.hosts, id)
	f.configOf[id] = hc
	return id
}

// read returns the table's view of the stream.
func (f *fleet) read() (dynamo.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	return f.inspect.Inspect(ctx, f.stream)
}

// waitInitialised waits until the fleet's initialisation is committed.
func (f *fleet) waitInitialised() {
	f.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if info, err := f.read(); err == nil && info.Initialised {
			return
		}
		for id, p := range f.running {
			if p.Exited() {
				f.t.Fatalf("host %s exited (%v) before the fleet initialised:\n%s", id, p.State(), p.Stderr())
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatal("the fleet did not initialise within 90 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs host and reads what the table held committed right after.
func (f *fleet) kill(id string) {
	f.t.Helper()
	p := f.running[id]
	if p.Exited() {
		f.t.Fatalf("host %s exited by itself (%v):\n%s", id, p.State(), p.Stderr())
	}
	p.Kill()
	at := time.Now().UnixNano()
	delete(f.running, id)
	snap := snapshot{host: id, killedAt: at}
	for {
		info, err := f.read()
		if err == nil {
			snap.readAt = time.Now().UnixNano()
			snap.committed = map[string]kinesisload.ShardProgress{}
			for sid, sh := range info.Shards {
				snap.committed[sid] = sh.Progress
			}
			break
		}
		if f.ctx.Err() != nil {
			f.t.Fatalf("read the table after killing %s: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.killed[id] = snap
}

// stop stops host with SIGTERM: it Closes its Loader, a planned move.
func (f *fleet) stop(id string) {
	f.t.Helper()
	p := f.running[id]
	if code, err := p.Term(90 * time.Second); err != nil || code != exitOK {
		f.t.Fatalf("host %s: exit %d after SIGTERM, %v:\n%s", id, code, err, p.Stderr())
	}
	delete(f.running, id)
	f.stopped[id] = true
}

// alive returns the running hosts, in start order.
func (f *fleet) alive() []string {
	var ids []string
	for _, id := range f.hosts {
		if _, ok := f.running[id]; ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// deliveries reads every host's file.
func (f *fleet) deliveries() []delivery {
	f.t.Helper()
	var all []delivery
	for _, id := range f.hosts {
		ds, err := readHost(id, f.configOf[id].Out)
		if err != nil {
			f.t.Fatal(err)
		}
		all = append(all, ds...)
	}
	// One machine, one clock: the order in which the Deliver calls began.
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	return all
}

// drain waits until every record of want was delivered by some host.
func (f *fleet) drain(want []killloop.Written) {
	f.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		seen := map[string]bool{}
		for _, d := range f.deliveries() {
			seen[d.data] = true
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w killloop.Written) bool { return seen[w.Data] })
		if len(missing) == 0 {
			return
		}
		for id, p := range f.running {
			if p.Exited() {
				f.t.Fatalf("host %s exited by itself (%v) with %d records missing:\n%s", id, p.State(), len(missing), p.Stderr())
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d of %d records not delivered 2m after the last move, e.g. %+v", len(missing), len(want), missing[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopAll stops every running host with SIGTERM.
func (f *fleet) stopAll() {
	f.t.Helper()
	for _, id := range f.alive() {
		f.stop(id)
	}
}

func seedOf(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_RELIABILITY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIDEMARK_RELIABILITY_SEED=%q: %v", s, err)
		}
	}
	return seed
}

// history writes records before any host starts: the fleet starts at
// LATEST, so none of them may be delivered. It lets them age 2 s: T0 is
// Kinesis's Date floored to the second, so a record of the second before
// the start may be delivered.
func (f *fleet) history() {
	f.t.Helper()
	h := make([]string, 10)
	for i := range h {
		h[i] = fmt.Sprintf("h-%03d", i)
	}
	if _, err := killloop.PutAll(f.ctx, f.api, f.stream, h); err != nil {
		f.t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
}

func (f *fleet) producer() *killloop.Producer {
	p := killloop.StartProducer(f.ctx, func(ctx context.Context, data []string) ([]killloop.Written, error) {
		return killloop.PutAll(ctx, f.api, f.stream, data)
	})
	f.t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			_, _ = p.Finish()
		}
	})
	return p
}

// TestFleetSIGKILLLoop runs three host processes (then between two and
// five) sharing a stream through dynalite, both emulators behind fault
// proxies, while a producer writes: hosts are killed with SIGKILL at
// random moments and replaced, hosts are added and stopped (planned), and
// the stream is split twice and merged once (with -short, split and
// merged once: a second split took the default run's drain past 30 s on a
// loaded machine). Then it checks the fleet-wide guarantee on what the
// hosts' Sinks got (see check).
func TestFleetSIGKILLLoop(t *testing.T) {
	kills := 30
	switch {
	case longForm():
		kills = 150
	case testing.Short():
		kills = 4 // still a split and a merge (at kills 1 and 2)
	}
	seed := seedOf(t)
	t.Logf("%d kills, seed %d (set TIDEMARK_RELIABILITY_SEED to repeat)", kills, seed)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*6*time.Second+5*time.Minute)
	defer cancel()
	f := newFleet(t, ctx, seed, 3)
	f.history()
	for range 3 {
		f.start()
	}
	f.waitInitialised()
	if err := f.kproxy.SetAll(kinesisFaults); err != nil {
		t.Fatal(err)
	}
	if err := f.dproxy.SetAll(dynamoFaults); err != nil {
		t.Fatal(err)
	}
	prod := f.producer()

	rng := rand.New(rand.NewPCG(seed, seed+1))
	reshardAt := map[int]func() string{
		kills / 4: func() string { return killloop.Split(ctx, t, f.api, f.stream) },
		kills / 2: func() string { return killloop.Merge(ctx, t, f.api, f.stream) },
	}
	if !testing.Short() {
		reshardAt[3*kills/4] = func() string { return killloop.Split(ctx, t, f.api, f.stream) }
	}
	var reshards []string
	added, removed := 0, 0
	loopStart := time.Now()
	for k := 0; k < kills; {
		if fn := reshardAt[k]; fn != nil {
			reshards = append(reshards, fmt.Sprintf("before kill %d: %s", k+1, fn()))
			delete(reshardAt, k)
		}
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		alive := f.alive()
		switch r := rng.IntN(8); {
		case r == 0 && len(alive) < 5:
			f.start()
			added++
		case r == 1 && len(alive) > 2:
			f.stop(alive[rng.IntN(len(alive))])
			removed++
		default:
			f.kill(alive[rng.IntN(len(alive))])
			k++
			if len(f.running) < 3 || rng.IntN(2) == 0 {
				f.start()
			}
		}
	}
	loopTook := time.Since(loopStart)
	want, err := prod.Finish()
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	if len(want) == 0 {
		t.Fatal("the producer wrote nothing")
	}
	if len(f.running) == 0 {
		f.start()
	}
	drainStart := time.Now()
	f.drain(want)
	drainTook := time.Since(drainStart)
	f.stopAll()
	st := check(t, f, want, false)

	kt, dt := f.kproxy.Total(), f.dproxy.Total()
	t.Logf("timings: total %v, loop %v (%d kills), drain %v", time.Since(began).Round(time.Millisecond), loopTook.Round(time.Millisecond), kills, drainTook.Round(time.Millisecond))
	t.Logf("hosts: %d started, %d killed, %d added beyond replacements, %d stopped (planned)", len(f.hosts), len(f.killed), added, len(f.stopped))
	t.Logf("records: %d written after initialisation, %d delivered, %d duplicate deliveries (%d of a killed host's window, %d of a lease lost unplanned); %d leases lost unplanned",
		len(want), st.delivered, st.dups, st.dupsKilled, st.dupsLost, st.lost)
	t.Logf("reshards: %v", reshards)
	t.Logf("kinesis proxy: %d requests, %d faults; dynamodb proxy: %d requests, %d faults", kt.Requests, kt.Faults(), dt.Requests, dt.Faults())
	if kt.Reset+kt.ServerError+kt.Throttle+kt.Truncate == 0 || dt.Reset+dt.ServerError+dt.Throttle+dt.Truncate == 0 {
		t.Error("a proxy injected no fault: the run proves nothing about them")
	}
	wantReshards := 3 // two splits and a merge
	if testing.Short() {
		wantReshards = 2 // a split and a merge
	}
	if len(reshards) != wantReshards {
		t.Errorf("%d reshards, want %d", len(reshards), wantReshards)
	}
	if st.dups == 0 {
		t.Log("no duplicate at all: no kill landed in an uncommitted window")
	}
}

// TestFleetPlannedMovesDeliverNothingTwice runs hosts that join and leave
// only by plan (start, Close on SIGTERM, scale-in) while the stream is
// split and merged, with faults on the Kinesis proxy and delays on the
// DynamoDB one, and checks the guarantee and that no record was delivered
// twice. With -short it takes five of the eight steps (a host added and
// one stopped, a split and a merge, the scale-in to one).
func TestFleetPlannedMovesDeliverNothingTwice(t *testing.T) {
	seed := seedOf(t)
	t.Logf("seed %d (set TIDEMARK_RELIABILITY_SEED to repeat)", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := newFleet(t, ctx, seed, 4)
	f.history()
	for range 3 {
		f.start()
	}
	f.waitInitialised()
	if err := f.kproxy.SetAll(kinesisFaults); err != nil {
		t.Fatal(err)
	}
	if err := f.dproxy.SetAll(delaysOnly); err != nil {
		t.Fatal(err)
	}
	prod := f.producer()
	// A planned move needs no lease to expire: the pause only lets the
	// moves of a step settle before the next (half as long with -short).
	pauseFor := leaseDuration
	if testing.Short() {
		pauseFor = leaseDuration / 2
	}
	pause := func() { time.Sleep(pauseFor) }
	var steps []string
	do := func(what string, fn func()) {
		pause()
		fn()
		steps = append(steps, what)
	}
	do("add a host", func() { f.start() })
	do("split", func() { killloop.Split(ctx, t, f.api, f.stream) })
	do("stop a host", func() { f.stop(f.alive()[0]) })
	if !testing.Short() {
		do("add a host", func() { f.start() })
	}
	do("merge", func() { killloop.Merge(ctx, t, f.api, f.stream) })
	if !testing.Short() {
		do("scale in to two", func() {
			for len(f.alive()) > 2 {
				f.stop(f.alive()[0])
			}
		})
		do("split", func() { killloop.Split(ctx, t, f.api, f.stream) })
	}
	do("scale in to one", func() {
		for len(f.alive()) > 1 {
			f.stop(f.alive()[0])
		}
	})
	pause()
	want, err := prod.Finish()
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	f.drain(want)
	f.stopAll()
	st := check(t, f, want, true)
	t.Logf("steps: %v", steps)
	t.Logf("hosts: %d started, %d stopped; records: %d written after initialisation, %d delivered, %d duplicates; %d shard owners changed",
		len(f.hosts), len(f.stopped), len(want), st.delivered, st.dups, st.moves)
	if st.moves == 0 {
		t.Error("no shard changed hosts: the run proves nothing about planned moves")
	}
}

// stats is what check counted.
type stats struct {
	delivered, dups, dupsKilled, dupsLost, lost, moves int
}

// check verifies the fleet-wide guarantee on every host's file and the
// table: every record of want delivered, nothing else (nothing from before
// the fleet's initialisation); in shard order within a lease; no parent
// record after a child's first; no record committed in a snapshot
// delivered after it; every duplicate from a killed host's uncommitted
// window or a lease lost unplanned (none when plannedOnly); and every
// parent of a read child COMPLETED in the table.
func check(t *testing.T, f *fleet, want []killloop.Written, plannedOnly bool) stats {
	t.Helper()
	var st stats
	all := f.deliveries()
	var ds []delivery
	lostAt := map[string]int64{} // host/shard/epoch -> when lost
	for _, d := range all {
		if d.lost {
			lostAt[fmt.Sprintf("%s/%s/%d", d.host, d.shard, d.epoch)] = d.at
			st.lost++
			continue
		}
		ds = append(ds, d)
	}
	st.delivered = len(ds)
	for _, d := range all {
		if d.lost {
			t.Logf("host %s lost shard %s (epoch %d) unplanned at %d: %s", d.host, d.shard, d.epoch, d.at, d.data)
		}
	}
	if plannedOnly && st.lost > 0 {
		t.Errorf("%d leases lost unplanned in a run with planned moves only", st.lost)
	}

	// Exactly the records written after the initialisation, each where
	// it was written.
	where := map[string]killloop.Written{}
	for _, w := range want {
		where[w.Data] = w
	}
	seen := map[string]bool{}
	for _, d := range ds {
		seen[d.data] = true
		w, ok := where[d.data]
		switch {
		case !ok:
			t.Errorf("host %s delivered %q (%s %s), which was not written after the fleet's initialisation", d.host, d.data, d.shard, d.seq)
		case w.Shard != d.shard || w.Seq != d.seq:
			t.Errorf("host %s delivered %q as %s %s, written as %s %s", d.host, d.data, d.shard, d.seq, w.Shard, w.Seq)
		}
	}
	for _, w := range want {
		if !seen[w.Data] {
			t.Errorf("%q (%s %s) was never delivered", w.Data, w.Shard, w.Seq)
		}
	}

	// Shard order: within a lease (host, shard, epoch) strictly
	// increasing; first deliveries of a shard increasing fleet-wide.
	lastInLease := map[string]string{}
	lastFirst := map[string]string{}
	occurrences := map[string][]delivery{}
	owners := map[string]string{}
	for _, d := range ds {
		key := fmt.Sprintf("%s/%s/%d", d.host, d.shard, d.epoch)
		if p := lastInLease[key]; p != "" && scan.CompareSequence(d.seq, p) <= 0 {
			t.Errorf("host %s, shard %s, epoch %d: %s delivered after %s", d.host, d.shard, d.epoch, d.seq, p)
		}
		lastInLease[key] = d.seq
		if o, ok := owners[d.shard]; ok && o != d.host {
			st.moves++
		}
		owners[d.shard] = d.host
		occurrences[d.data] = append(occurrences[d.data], d)
		if len(occurrences[d.data]) > 1 {
			continue
		}
		if p := lastFirst[d.shard]; p != "" && scan.CompareSequence(d.seq, p) <= 0 {
			t.Errorf("shard %s: first delivery of %s (host %s) after %s", d.shard, d.seq, d.host, p)
		}
		lastFirst[d.shard] = d.seq
	}

	// Children after parents, whichever hosts read them.
	firstAt, lastAt := map[string]int64{}, map[string]int64{}
	for _, d := range ds {
		if _, ok := firstAt[d.shard]; !ok {
			firstAt[d.shard] = d.at
		}
		lastAt[d.shard] = d.at
	}
	lineage := killloop.ListShards(f.ctx, t, f.api, f.stream)
	final, err := f.read()
	if err != nil {
		t.Fatalf("read the table at the end: %v", err)
	}
	for _, s := range lineage {
		child := aws.ToString(s.ShardId)
		fc, read := firstAt[child]
		if !read {
			continue
		}
		for _, parent := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			id := aws.ToString(parent)
			if id == "" {
				continue
			}
			if lp, ok := lastAt[id]; ok && lp >= fc {
				t.Errorf("parent %s has a record delivered at %d, not before child %s's first at %d", id, lp, child, fc)
			}
			if state := final.Shards[id].Progress.State; state != kinesisload.StateCompleted {
				t.Errorf("child %s was read but its parent %s is %v in the table, want COMPLETED", child, id, state)
			}
		}
	}

	// A record committed when a snapshot was read is not delivered by a
	// Deliver call that began after.
	for _, snap := range f.killed {
		for _, d := range ds {
			if pr, ok := snap.committed[d.shard]; ok && d.at > snap.readAt && killloop.Covers(pr.Position, d.seq) {
				t.Errorf("host %s delivered %s %s (%q) after the kill of %s, although it was committed then at %v", d.host, d.shard, d.seq, d.data, snap.host, pr.Position)
			}
		}
	}

	// Every duplicate comes from an unplanned move: an earlier delivery by
	// a host killed before it was delivered again (and not committed in
	// the table right after the kill, when that read was quick enough to
	// come before any failover), or by a lease lost unplanned.
	for data, occ := range occurrences {
		for j := 1; j < len(occ); j++ {
			st.dups++
			again := occ[j]
			if plannedOnly {
				t.Errorf("%q (%s %s) delivered %d times in a run with planned moves only: by %v", data, again.shard, again.seq, len(occ), hostsOf(occ))
				break
			}
			why := ""
			for _, prev := range occ[:j] {
				if snap, ok := f.killed[prev.host]; ok && snap.killedAt < again.at {
					pr, known := snap.committed[prev.shard]
					if known && snap.readAt-snap.killedAt < int64(leaseDuration) && killloop.Covers(pr.Position, prev.seq) {
						t.Errorf("%q (%s %s) delivered again by %s, but it was committed (%v) when %s was killed", data, prev.shard, prev.seq, again.host, pr.Position, prev.host)
					}
					why = "killed"
					break
				}
				if _, ok := lostAt[fmt.Sprintf("%s/%s/%d", prev.host, prev.shard, prev.epoch)]; ok {
					why = "lost"
					break
				}
			}
			switch why {
			case "killed":
				st.dupsKilled++
			case "lost":
				st.dupsLost++
			default:
				t.Errorf("%q (%s %s) delivered again by %s at %d, and no earlier delivery (%v) was by a host killed before or a lease lost unplanned", data, again.shard, again.seq, again.host, again.at, hostsOf(occ[:j]))
			}
		}
	}
	return st
}

func hostsOf(ds []delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s@%d(epoch %d)", d.host, d.at, d.epoch))
	}
	return out
}
