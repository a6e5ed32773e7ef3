package dynamo

import (
	"context"
	"fmt"
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
	// Progress is the shard's progress as every host sees it.
	Progress kinesisload.ShardProgress
}

// HostInfo is a host's heartbeat item.
type HostInfo struct {
	// Counter is the heartbeat counter; it moves once per RenewInterval
	// while the host is alive.
	Counter uint64
	// Left is true once the host left the stream (Membership.Leave).
	Left bool
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

// Inspect reads stream's items (one consistent Query per generation) for
// tools and tests: owners, epochs, positions, lineage and heartbeats of
// the current generation, and the shards of the archived ones. It does not
// join the fleet and writes nothing. Whether a host is alive is not in the
// table: watch its Counter move.
func (c *Coordinator) Inspect(ctx context.Context, stream string) (StreamInfo, error) {
	if err := c.ensureTable(ctx); err != nil {
		return StreamInfo{}, err
	}
	read := func(part string) (*snapshot, error) {
		snap, err := c.query(ctx, part)
		if err != nil {
			if classify(err) == classFatal {
				return nil, c.fatal("Query", err)
			}
			return nil, fmt.Errorf("dynamo: table %s: stream %s: Query: %w", c.cfg.Table, stream, err)
		}
		return snap, nil
	}
	snap, err := read(stream)
	if err != nil {
		return StreamInfo{}, err
	}
	ident := snap.ident
	out := StreamInfo{Identity: ident.id, Generation: ident.gen}
	for _, g := range ident.archived {
		s := snap
		if g.Gen > 0 {
			if s, err = read(partition(stream, g.Gen)); err != nil {
				return StreamInfo{}, err
			}
		}
		out.Archived = append(out.Archived, ArchivedGeneration{Generation: g, Shards: shardInfos(s)})
	}
	if ident.gen > 0 {
		if snap, err = read(partition(stream, ident.gen)); err != nil {
			return StreamInfo{}, err
		}
	}
	out.Shards, out.Hosts = shardInfos(snap), map[string]HostInfo{}
	out.Initialised, out.InitLockOwner, out.StartTime = snap.init.committed != "", snap.init.lockOwner, snap.init.t0
	for id, hb := range snap.hearts {
		out.Hosts[id] = HostInfo{Counter: hb.counter, Left: hb.left}
	}
	return out, nil
}

// shardInfos is the visible shards of one generation's items.
func shardInfos(snap *snapshot) map[string]ShardInfo {
	out := map[string]ShardInfo{}
	for id, it := range snap.shards {
		p := it.visible(snap.init.committed)
		if p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0 && it.owner == "" {
			continue // pending only: invisible
		}
		out[id] = ShardInfo{Owner: it.owner, Epoch: it.epoch, HandoffTo: it.handoff, Progress: p}
	}
	return out
}

// Generation is one generation of a stream's progress in the table: the
// progress made on one stream of the name, from its initialisation until
// a host started the fleet over on a stream re-created under the name
// ([kinesisload.StreamRecreatedStartOver]). Each generation's items have
// a partition of their own; the old ones stay, the archive.
type Generation struct {
	// Gen counts the start-overs before it: 0 is the first.
	Gen uint64 `json:"gen"`
	// Identity is the stream the generation read (zero when it was
	// started over before an identity was stored).
	Identity kinesisload.StreamIdentity `json:"identity"`
	// ReplacedBy is the stream of the next generation.
	ReplacedBy kinesisload.StreamIdentity `json:"replaced_by"`
}
