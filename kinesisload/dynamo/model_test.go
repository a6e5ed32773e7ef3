package dynamo

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

var (
	modelShards = flag.Int("fleet.modelshards", 10000, "shards of the cost model")
	modelHosts  = flag.Int("fleet.modelhosts", 50, "hosts of the cost model")
)

// DynamoDB's limits the model compares with.
const (
	partitionRCU = 3000      // read units per second of one partition
	partitionWCU = 1000      // write units per second of one partition
	itemLimit    = 400 << 10 // bytes of one item
)

// attrSize is the size DynamoDB counts for a value (the rules of "Item
// sizes and formats" in its developer guide, as dynalite applies them): a
// string its UTF-8 bytes, a number 1 byte plus 1 per two significant
// digits, a map 3 bytes plus, per entry, its name, its value and 1 byte.
func attrSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		// Significant digits: no sign, no point, no leading or
		// trailing zeroes.
		digits := strings.ReplaceAll(strings.TrimPrefix(v.Value, "-"), ".", "")
		digits = strings.TrimRight(strings.TrimLeft(digits, "0"), "0")
		if digits == "" {
			return 1
		}
		return 1 + (len(digits)+1)/2
	case *types.AttributeValueMemberBOOL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + attrSize(e) + 1
		}
		return n
	}
	panic(fmt.Sprintf("attrSize: %T", v))
}

// itemSize is the size DynamoDB counts for the item the Table writes for
// it: the names and values of its attributes, key and version included.
func itemSize(it fleet.Item) int {
	n := 0
	for name, v := range encode(it, max(it.Version, 1)) {
		n += len(name) + attrSize(v)
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// modelFleet runs hosts fleet coordinators (the protocol's own code, on a
// memory table and a manual clock) on shards shards until each holds its
// share, commits a position of 56 digits (the length of Kinesis's sequence
// numbers) on every shard, and returns the table: the items as the
// protocol writes them.
func modelFleet(tb testing.TB, stream string, shards, hosts int) *fleet.MemoryTable {
	tb.Helper()
	ctx := context.Background()
	table := fleet.NewMemoryTable()
	var now atomic.Int64
	clock := func() time.Time { return time.Unix(1_900_000_000, 0).Add(time.Duration(now.Load())) }
	type host struct {
		c      *fleet.Coordinator
		m      kinesisload.Membership
		leases map[string]kinesisload.Lease
	}
	var hs []*host
	for i := range hosts {
		// A default HostID on EC2: hostname, process ID, 6 hex digits.
		id := fmt.Sprintf("ip-10-0-%d-%d.eu-west-1.compute.internal-%d-%06x", i/250, i%250, 10000+i, i)
		c, err := fleet.New(table, fleet.Config{HostID: id, ManualRounds: true, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			tb.Fatal(err)
		}
		m, err := c.Join(ctx, stream)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = m.Leave(ctx) })
		hs = append(hs, &host{c: c, m: m, leases: map[string]kinesisload.Lease{}})
	}
	seq := func(i, n int) string { return fmt.Sprintf("4962%026d%026d", i, n) } // 56 digits
	ids := make([]string, shards)
	index := make(map[string]int, shards)
	ups := make([]kinesisload.ShardProgress, shards)
	for i := range shards {
		// Every shard the child of a split (one parent, pruned since),
		// resolved from LATEST to a sequence number.
		ids[i] = fmt.Sprintf("shardId-%012d", 20000+i)
		index[ids[i]] = i
		ups[i] = kinesisload.ShardProgress{ShardID: ids[i], State: kinesisload.StateActive, Parents: []string{fmt.Sprintf("shardId-%012d", i)},
			Position: scan.AfterSequence(seq(i, 1))}
	}
	if err := hs[0].m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, stream, ups)
	}); err != nil {
		tb.Fatal(err)
	}
	round := func() {
		now.Add(int64(time.Second))
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Go(h.c.Round)
		}
		wg.Wait()
		for _, h := range hs {
			ls, err := h.m.Acquire(ctx, ids)
			if err != nil {
				tb.Fatal(err)
			}
			for _, l := range ls {
				h.leases[l.Shard()] = l
			}
			for id, l := range h.leases {
				if l.Err() != nil {
					delete(h.leases, id)
				}
			}
		}
	}
	share := int(math.Ceil(float64(shards) / float64(hosts)))
	for r := 0; ; r++ {
		round()
		held, fair := 0, true
		for _, h := range hs {
			held += len(h.leases)
			fair = fair && len(h.leases) >= share-1 && len(h.leases) <= share
		}
		if held == shards && fair {
			break
		}
		if r > 2000 {
			tb.Fatalf("%d hosts hold %d of %d shards, not balanced, after %d rounds", hosts, held, shards, r)
		}
	}
	for _, h := range hs {
		for id, l := range h.leases {
			if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence(seq(index[id], 2))}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	round() // the positions are written
	return table
}

// BenchmarkFleetCostModel is the cost model of the fleet's table at
// -fleet.modelshards shards (10,000) and -fleet.modelhosts hosts (50):
// it runs the protocol on a memory table until the hosts are balanced
// and every shard has committed a position, sizes every item as DynamoDB
// counts it (encoded as this package's Table writes it), and computes,
// with the default intervals (RenewInterval 1 s, ResyncInterval 30 s, the
// Loader's ListShardsInterval 30 s), the read and write units per second
// of the busiest partition keys against DynamoDB's per-partition limits
// (3,000 RCU/s, 1,000 WCU/s), and the largest items against the 400 KB
// item limit (it fails when an item reaches it). No emulator: the units
// are computed, not measured (BenchmarkFleetCoordinationCost measures
// them on dynalite at 1,000 shards, which this model reproduces when run
// with -fleet.modelshards 1000 -fleet.modelhosts 20).
//
// The stream's partition key: every host's heartbeat (one UpdateItem of
// the roster a second: the roster's size in 1 KB units), and the reads of
// the whole partition (a strongly consistent Query: its items' size in
// 4 KB units): one by every host each 30 s (its Loader reads the
// partition when it lists shards, and that read also restarts the
// ResyncInterval of its rounds, so the two coincide: measured so on
// dynalite; were they out of phase, twice that). After a change (a lease
// moved, a state advanced, a shard added or pruned) every other host reads
// the items its hint names, one GetItem each (its Loader, woken, reads its
// coordinator's view); after a change no hint covers (a host back with
// changes made before, a change of more than 16 items) every host reads
// the partition once.
// Each host's positions partition key: one PutItem of its chunk a second
// at load (its size in 1 KB units), which carries the host's beat: the
// stream's key then sees a GetItem of the roster per host a second
// instead of the heartbeat's write, and the fleet reads each host's
// first chunk 20 times a lease duration (see the fleet package's doc).
func BenchmarkFleetCostModel(b *testing.B) {
	shards, hosts := *modelShards, *modelHosts
	const stream = "clickstream-events-prod" // the partition key is in every item
	var table *fleet.MemoryTable
	for b.Loop() {
		table = modelFleet(b, stream, shards, hosts)
	}
	ctx := context.Background()
	var partBytes, rosterBytes, maxShard, maxChunk, chunkEntries, agedRoster int
	var shardTotal, shardCount int
	for _, p := range table.Partitions() {
		items, err := table.Query(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		for _, it := range items {
			n := itemSize(it)
			if n >= itemLimit {
				b.Fatalf("item %s/%s: %d bytes, DynamoDB's limit is %d", it.Partition, it.Key, n, itemLimit)
			}
			switch {
			case p == stream:
				partBytes += n
				switch {
				case it.Key == "roster":
					rosterBytes = n
					// A year on: counters of 8 digits, a million changes.
					aged := it.Clone()
					for h := range aged.Maps["beats"] {
						aged.Maps["beats"][h] = "c=31536000 v=1000000"
					}
					agedRoster = itemSize(aged)
				case strings.HasPrefix(it.Key, "shard#"):
					maxShard = max(maxShard, n)
					shardTotal += n
					shardCount++
				}
			case strings.Contains(p, "#pos#"):
				if n > maxChunk {
					maxChunk, chunkEntries = n, len(it.Maps["pos"])
				}
			}
		}
	}
	// With the default intervals, per second.
	const renew, resync, list = 1.0, 30.0, 30.0
	h := float64(hosts)
	readRCU := float64(ceilDiv(partBytes, 4096))                    // one Query of the stream's partition
	beatWCU := float64(ceilDiv(max(rosterBytes, agedRoster), 1024)) // one heartbeat
	steadyRCU := h / min(resync, list) * readRCU                    // idle or at load, nothing changing
	steadyWCU := h / renew * beatWCU                                // the heartbeats
	itemRCU := (h - 1) * float64(ceilDiv(maxShard, 4096))           // every other host reads an item a change wrote
	changeRCU := h * readRCU                                        // every host reads the partition after a change no hint covers
	chunkWCU := float64(ceilDiv(maxChunk, 1024)) / renew            // a host's positions at load
	fullChunk := maxChunk * 1000 / max(chunkEntries, 1)             // a chunk of 1,000 shards
	b.Logf("%d shards, %d hosts: shard items %d bytes on average (at most %d), the roster %d bytes (%d a year on), the stream's partition %d bytes; a host's positions %d bytes for %d shards (a full chunk of 1,000 about %d bytes)",
		shards, hosts, shardTotal/max(shardCount, 1), maxShard, rosterBytes, agedRoster, partBytes, maxChunk, chunkEntries, fullChunk)
	b.Logf("stream's partition key: %.0f RCU per read of the partition; steady %.0f RCU/s (%.0f%% of %d) and %.0f WCU/s (%.0f%% of %d); a change costs %.0f RCU per item it wrote within a round (%.1f%% of a second's %d), one no hint covers %.0f RCU (%.0f%%)",
		readRCU, steadyRCU, 100*steadyRCU/partitionRCU, partitionRCU, steadyWCU, 100*steadyWCU/partitionWCU, partitionWCU, itemRCU, 100*itemRCU/partitionRCU, partitionRCU, changeRCU, 100*changeRCU/partitionRCU)
	b.Logf("a host's positions partition key at load: %.0f WCU/s (%.1f%% of %d)", chunkWCU, 100*chunkWCU/partitionWCU, partitionWCU)
	// At load a host's beat rides on its first chunk: the round reads the
	// roster instead of writing it, and the fleet reads each host's first
	// chunk 20 times a lease duration (10 s).
	const lease, watches = 10.0, 20.0
	rosterRCU := float64(ceilDiv(max(rosterBytes, agedRoster), 4096))
	loadRCU := steadyRCU + h/renew*rosterRCU
	watchRCU := watches / lease * float64(ceilDiv(maxChunk, 4096))
	b.Logf("at load: the stream's partition key %.0f RCU/s (%.0f%% of %d) and no beat written; a host's positions key %.0f RCU/s for the watches; the fleet writes %.0f items a second and reads %.0f RCU/s",
		loadRCU, 100*loadRCU/partitionRCU, partitionRCU, watchRCU, h/renew, loadRCU+h*watchRCU)
	if fullChunk >= itemLimit {
		b.Fatalf("a chunk of 1,000 positions would be about %d bytes, DynamoDB's limit is %d", fullChunk, itemLimit)
	}
	b.ReportMetric(float64(partBytes)/1e6, "partition-MB")
	b.ReportMetric(readRCU, "RCU/read")
	b.ReportMetric(steadyRCU, "stream-key-RCU/s")
	b.ReportMetric(steadyRCU/partitionRCU, "stream-key-of-RCU-limit")
	b.ReportMetric(steadyWCU, "stream-key-WCU/s")
	b.ReportMetric(steadyWCU/partitionWCU, "stream-key-of-WCU-limit")
	b.ReportMetric(itemRCU, "RCU/item-changed")
	b.ReportMetric(changeRCU, "RCU/unhinted-change")
	b.ReportMetric(chunkWCU, "pos-key-WCU/s")
	b.ReportMetric(loadRCU, "stream-key-load-RCU/s")
	b.ReportMetric(watchRCU, "pos-key-RCU/s")
	b.ReportMetric(float64(maxShard), "max-shard-item-B")
	b.ReportMetric(float64(max(rosterBytes, agedRoster)), "roster-B")
	b.ReportMetric(float64(fullChunk), "full-chunk-B")
}
