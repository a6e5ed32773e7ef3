package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// ShardInfo is what the table holds for one shard.
type ShardInfo struct {
	// Owner is the host holding the shard's lease; empty when free.
	Owner string
	// Epoch is the fencing token of the last owner change.
	Epoch uint64
	// HandoffTo is the host that asked for the shard, if any.
	HandoffTo string
	// Progress is the shard's progress as every host sees it, with the
	// position its owner last wrote with its positions (under the
	// shard's epoch) when it is further than the item's.
	Progress kinesisload.ShardProgress
}

// HostInfo is a host's entry in the roster.
type HostInfo struct {
	// Counter is the heartbeat counter; it moves once per RenewInterval
	// while the host is alive. A busy host carries its beat on its first
	// positions chunk rather than its roster entry: Counter is the larger
	// of the two.
	Counter uint64
	// Changes counts the host's changes to the table.
	Changes uint64
	// Left is true once the host left the stream (Membership.Leave).
	Left bool
	// Load is the sum of its shards' weights (bytes/s), published when
	// balancing by throughput.
	Load float64
}

// StreamInfo is a stream's items in the table, as one read saw them.
type StreamInfo struct {
	// Shards is keyed by shard ID.
	Shards map[string]ShardInfo
	// Hosts is keyed by host ID.
	Hosts map[string]HostInfo
	// Identity is the stored stream identity (zero when none): the
	// stream the current generation reads.
	Identity kinesisload.StreamIdentity
	// Generation is the current generation: how many times the fleet
	// started over on a stream re-created under the name. Shards, Hosts
	// and the initialisation are the current generation's.
	Generation uint64
	// Archived holds the earlier generations, oldest first, each with
	// its shards as they were left: the progress of the streams that
	// were re-created.
	Archived []ArchivedGeneration
	// Initialised is true once the fleet's initialisation is committed.
	Initialised bool
	// InitLockOwner is the host that holds (or last held) the
	// initialisation lock.
	InitLockOwner string
	// StartTime is T0, the time on Kinesis's clock LATEST is resolved
	// at, as the first holder of the initialisation lock saved it (zero
	// when none was saved: no LATEST to resolve).
	StartTime time.Time
}

// ArchivedGeneration is a generation the fleet left when it started over,
// with its shards as they were left.
type ArchivedGeneration struct {
	Generation
	// Shards is keyed by shard ID.
	Shards map[string]ShardInfo
}

// Inspect reads stream's items for tools and tests: owners, epochs,
// positions, lineage and heartbeats of the current generation, and the
// shards of the archived ones. It reads one partition per generation and
// the positions of the hosts that own shards; it does not join the fleet
// and writes nothing. Whether a host is alive is not in the table: watch
// its Counter move.
func Inspect(ctx context.Context, table Table, stream string) (StreamInfo, error) {
	r := reader{table: table, stream: stream}
	it, err := table.Get(ctx, stream, keyIdentity)
	if err != nil {
		return StreamInfo{}, fmt.Errorf("fleet: stream %s: reading the identity item: %w", stream, err)
	}
	ident, err := decodeIdentity(it)
	if err != nil {
		return StreamInfo{}, err
	}
	out := StreamInfo{Identity: ident.id, Generation: ident.gen}
	for _, g := range ident.archived {
		shards, _, _, err := r.generation(ctx, g.Gen)
		if err != nil {
			return StreamInfo{}, err
		}
		out.Archived = append(out.Archived, ArchivedGeneration{Generation: g, Shards: shards})
	}
	shards, snap, hosts, err := r.generation(ctx, ident.gen)
	if err != nil {
		return StreamInfo{}, err
	}
	out.Shards, out.Hosts = shards, hosts
	out.Initialised, out.InitLockOwner, out.StartTime = snap.init.committed != "", snap.init.lockOwner, snap.init.t0
	return out, nil
}

// Inspect is [Inspect] on the Coordinator's table.
func (c *Coordinator) Inspect(ctx context.Context, stream string) (StreamInfo, error) {
	return Inspect(ctx, c.table, stream)
}

// reader reads generations for Inspect.
type reader struct {
	table  Table
	stream string
}

// generation reads generation gen's shards, with the positions of their
// owners, and its hosts.
func (r reader) generation(ctx context.Context, gen uint64) (map[string]ShardInfo, *snapshot, map[string]HostInfo, error) {
	part := partition(r.stream, gen)
	snap, err := query(ctx, r.table, part)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fleet: stream %s: reading generation %d: %w", r.stream, gen, err)
	}
	positions := map[string]map[string]posEntry{}
	out := map[string]ShardInfo{}
	for id, s := range snap.shards {
		p := s.visible(snap.init.committed)
		if p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0 && s.owner == "" {
			continue // pending only: invisible
		}
		if s.owner != "" {
			entries, ok := positions[s.owner]
			if !ok {
				items, err := r.table.Query(ctx, posPartition(part, s.owner))
				if err != nil {
					return nil, nil, nil, fmt.Errorf("fleet: stream %s: reading the positions of host %s: %w", r.stream, s.owner, err)
				}
				if entries, err = decodePositions(items); err != nil {
					return nil, nil, nil, err
				}
				positions[s.owner] = entries
			}
			if e, ok := entries[id]; ok && e.epoch == s.epoch {
				p = kinesisload.MergeProgress(p, kinesisload.ShardProgress{ShardID: id, Position: e.pos})
			}
		}
		out[id] = ShardInfo{Owner: s.owner, Epoch: s.epoch, HandoffTo: s.handoff, Progress: p}
	}
	for _, id := range slices.Sorted(maps.Keys(snap.roster.bad)) {
		return nil, nil, nil, snap.roster.bad[id] // a tool names what to fix; hosts carry on
	}
	hosts := map[string]HostInfo{}
	for id, b := range snap.roster.beats {
		counter := b.counter
		if b.chunked {
			it, err := r.table.GetField(ctx, posPartition(part, id), prefixPos+"0", fieldBeat)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("fleet: stream %s: reading the positions of host %s: %w", r.stream, id, err)
			}
			if c, err := strconv.ParseUint(it.Field(fieldBeat), 10, 64); err == nil {
				counter = max(counter, c)
			}
		}
		hosts[id] = HostInfo{Counter: counter, Changes: b.changes, Left: b.left, Load: b.load}
	}
	return out, snap, hosts, nil
}
