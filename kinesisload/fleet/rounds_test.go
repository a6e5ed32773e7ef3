package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// callLog is a Table that logs one host's heartbeats (when each is sent,
// and what its answer says of another host's changes) and its reads of
// the stream's partition, in order; each heartbeat takes a few
// milliseconds, as a call over a network does.
type callLog struct {
	fleet.Table
	stream, other string

	mu     sync.Mutex
	events []callEvent
}

// callEvent is one entry of a callLog: a heartbeat sent ("beat>"), a
// heartbeat answered ("beat<", with the other host's change count in
// the roster), or a read of the stream's partition or of a shard item
// ("read").
type callEvent struct {
	op      string
	changes uint64
}

func (c *callLog) log(e callEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *callLog) snapshot() []callEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]callEvent(nil), c.events...)
}

func (c *callLog) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	if key != "roster" {
		return c.Table.SetEntry(ctx, partition, key, field, entry, old, value)
	}
	c.log(callEvent{op: "beat>"})
	time.Sleep(5 * time.Millisecond)
	it, err := c.Table.SetEntry(ctx, partition, key, field, entry, old, value)
	if err == nil {
		var n uint64
		for f := range strings.FieldsSeq(it.Maps["beats"][c.other]) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				n, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		c.log(callEvent{op: "beat<", changes: n})
	}
	return it, err
}

// Get of a shard item is a read too: the one a hint names.
func (c *callLog) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if partition == c.stream && strings.HasPrefix(key, "shard#") {
		c.log(callEvent{op: "read"})
	}
	return c.Table.Get(ctx, partition, key)
}

func (c *callLog) Query(ctx context.Context, partition string) ([]fleet.Item, error) {
	if partition == c.stream {
		c.log(callEvent{op: "read"})
	}
	return c.Table.Query(ctx, partition)
}

// A change one host makes is read by another in the round of the
// heartbeat that tells it: a host balances right after each heartbeat,
// with what the heartbeat's answer said. A balance loop on a ticker of its
// own ran beside the heartbeat, began before the heartbeat's answer came
// back, and read the change only a round later: a rebalance took about
// three rounds per steal instead of two (a join of a fourth host to 48
// shards took 3.3 lease durations on dynalite, 2.2 before the rounds were
// split in two items).
func TestAHostReadsAChangeInTheRoundOfTheHeartbeatThatToldIt(t *testing.T) {
	// In a bubble: the rounds' tickers and the heartbeats' latency run on
	// its clock, so a busy machine does not reorder them.
	synctest.Test(t, testAHostReadsAChangeInTheRoundOfTheHeartbeatThatToldIt)
}

func testAHostReadsAChangeInTheRoundOfTheHeartbeatThatToldIt(t *testing.T) {
	ctx := context.Background()
	mem := fleet.NewMemoryTable()
	cfg := fleet.Config{LeaseDuration: 5 * time.Second, RenewInterval: 50 * time.Millisecond, ResyncInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	join := func(id string, table fleet.Table) kinesisload.Membership {
		c := cfg
		c.HostID = id
		co, err := fleet.New(table, c)
		if err != nil {
			t.Fatal(err)
		}
		m, err := co.Join(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Leave(ctx) })
		return m
	}
	x := join("x", mem)
	y := &callLog{Table: mem, stream: "s", other: "x"}
	join("y", y)
	// x changes something, once y has read the table, then again each
	// time y read it after the change.
	reads := func() int {
		n := 0
		for _, e := range y.snapshot() {
			if e.op == "read" {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for reads() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("y never read the table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	const changes = 8
	for i := range changes {
		before := reads()
		if err := x.Store().Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: fmt.Sprintf("shard-%d", i), State: kinesisload.StateActive, Position: scan.TrimHorizon()}}); err != nil {
			t.Fatal(err)
		}
		for reads() == before {
			if time.Now().After(deadline) {
				t.Fatalf("change %d: y never read the table after it", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(2 * cfg.RenewInterval)
	}
	// After each heartbeat whose answer showed x's change count move, y's
	// next call is the read, not another heartbeat.
	events := y.snapshot()
	var seen uint64
	late := 0
	for i, e := range events {
		if e.op != "beat<" || e.changes <= seen {
			continue
		}
		for _, next := range events[i+1:] {
			if next.op == "read" {
				break
			}
			if next.op == "beat>" {
				late++
				t.Errorf("x's change %d was in y's heartbeat, but y sent another heartbeat before it read the table", e.changes)
				break
			}
		}
		seen = e.changes
	}
	if seen < changes {
		t.Fatalf("y's heartbeats showed %d of x's %d changes", seen, changes)
	}
	t.Logf("%d of %d changes read a round late; y's calls: %v", late, seen, events)
}

// rosterWrites is a Table that counts the writes of the roster.
type rosterWrites struct {
	fleet.Table
	mu sync.Mutex
	n  int
}

func (r *rosterWrites) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	if key == "roster" {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
	return r.Table.SetEntry(ctx, partition, key, field, entry, old, value)
}

func (r *rosterWrites) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// A round that takes many shards tells the other hosts once: its takes
// are followed by one write of its roster entry, not one each. (A host
// taking the 8 shards of a dead host made 8 roster writes, one after each
// take and before its Loader could start any of them: failover took 1.18
// lease durations on dynalite where the version before took 1.08.)
func TestARoundThatTakesManyShardsWritesTheRosterOnce(t *testing.T) {
	ctx := context.Background()
	table := &rosterWrites{Table: fleet.NewMemoryTable()}
	var now atomic.Int64
	c, err := fleet.New(table, fleet.Config{HostID: "a", ManualRounds: true, Logger: slog.New(slog.DiscardHandler),
		Clock: func() time.Time { return start.Add(time.Duration(now.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Leave(ctx) }()
	var ids []string
	var ups []kinesisload.ShardProgress
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("shard-%02d", i))
		ups = append(ups, kinesisload.ShardProgress{ShardID: ids[i], State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	}
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return st.Save(ctx, "s", ups) }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, ids); err != nil { // offers every shard
		t.Fatal(err)
	}
	before := table.count()
	now.Add(int64(time.Second))
	c.Round()
	writes := table.count() - before
	ls, err := m.Acquire(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 10 {
		t.Fatalf("the round granted %d of 10 shards", len(ls))
	}
	// The heartbeat, and one write telling the takes.
	if writes != 2 {
		t.Errorf("a round that took 10 shards wrote the roster %d times, want 2 (the heartbeat, then the takes told once)", writes)
	}
}
