package kinesisload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tidemark/tidemark/journal"
)

// PositionStore is the durable per-shard progress of the Loader: lineage,
// state and position of every shard it tracks. The default,
// [JournalStore], keeps it in a [journal.Journal].
//
// Implementations must be safe for concurrent use.
type PositionStore interface {
	// Load returns the stored progress of every shard of stream, keyed
	// by shard ID: an empty map, not an error, when nothing is stored.
	// The caller may modify the map it gets.
	Load(ctx context.Context, stream string) (map[string]ShardProgress, error)

	// Save durably applies every update to stream's progress as one
	// atomic step: after Save returns nil they survive a crash; after a
	// crash during Save, Load sees all of them or none. Each update is
	// merged into the stored progress of its shard and never moves it
	// back: a state only advances, a position is replaced only by one
	// further along (LATEST < TRIM_HORIZON < AT_TIMESTAMP, by time < a
	// record position, by sequence number < SHARD_END), and parents
	// accumulate.
	// So Save is idempotent, and updates may be saved in any order.
	Save(ctx context.Context, stream string, updates []ShardProgress) error
}

// Errors of the position store.
var (
	// ErrStoreCorrupt is wrapped when a stored record cannot be decoded.
	ErrStoreCorrupt = errors.New("kinesisload: position store record cannot be decoded")
)

// JournalStore is the default [PositionStore]: every Save is one durable
// journal record, and a snapshot of the whole state is taken every
// SnapshotEvery saves so the journal stays short.
type JournalStore struct {
	j     journal.Journal
	every uint64
	// partBytes is the largest part of a Save split over several records
	// (see storebatch.go). Default defaultPartBytes; tests lower it.
	partBytes int

	mu      sync.Mutex
	streams map[string]map[string]ShardProgress
	// applied holds the indexes applied above done: every index <= done
	// is applied, so a snapshot at done covers exactly what it says.
	done     uint64
	applied  map[uint64]bool
	lastSnap uint64
	snapping bool // a snapshot is being written
	inflight int  // Saves between Append and apply
	stale    bool // an Append failed with an unknown outcome; resync
}

var _ PositionStore = (*JournalStore)(nil)

// DefaultSnapshotEvery is how many saves a [JournalStore] lets accumulate
// before it takes a snapshot.
const DefaultSnapshotEvery = 4096

// storeRecord is one Save in the journal, one part of a Save too large for
// one record, the commit of such a Save, or a prune (see storebatch.go).
// A record with none of the batch fields is a whole Save, as every record
// was before batches existed.
type storeRecord struct {
	Stream  string          `json:"stream"`
	Updates []ShardProgress `json:"updates,omitempty"`
	// Batch names the Save a part belongs to; Part numbers it from 1.
	Batch string `json:"batch,omitempty"`
	Part  int    `json:"part,omitempty"`
	// Commit names the Save whose Parts parts it publishes.
	Commit string `json:"commit,omitempty"`
	Parts  int    `json:"parts,omitempty"`
	// Prune lists shards whose progress is dropped.
	Prune []string `json:"prune,omitempty"`
}

// storeSnapshot is the whole state.
type storeSnapshot struct {
	Streams map[string]map[string]ShardProgress `json:"streams"`
}

// NewJournalStore replays j into memory and returns a store that saves into
// it. snapshotEvery is the number of saves between snapshots; 0 means
// [DefaultSnapshotEvery]. The caller keeps ownership of j and closes it
// after the store is no longer used.
func NewJournalStore(ctx context.Context, j journal.Journal, snapshotEvery uint64) (*JournalStore, error) {
	if snapshotEvery == 0 {
		snapshotEvery = DefaultSnapshotEvery
	}
	s := &JournalStore{j: j, every: snapshotEvery, partBytes: defaultPartBytes}
	if err := s.replay(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// replay rebuilds the state from the journal, and replaces the store's
// state only when it succeeds. Called with no Save in flight: at
// construction, and by a resync under s.mu.
func (s *JournalStore) replay(ctx context.Context) error {
	fresh := &JournalStore{streams: map[string]map[string]ShardProgress{}}
	// Parts of batches whose commit has not been replayed yet; those
	// never committed are dropped at the end.
	parts := map[string][]storeRecord{}
	err := s.j.Replay(ctx, func(e journal.Entry) error {
		if e.Snapshot {
			var snap storeSnapshot
			if err := json.Unmarshal(e.Data, &snap); err != nil {
				return fmt.Errorf("%w: snapshot at index %d: %v", ErrStoreCorrupt, e.Index, err)
			}
			if snap.Streams != nil {
				fresh.streams = snap.Streams
			}
			fresh.lastSnap = e.Index
		} else {
			var rec storeRecord
			if err := json.Unmarshal(e.Data, &rec); err != nil {
				return fmt.Errorf("%w: record %d: %v", ErrStoreCorrupt, e.Index, err)
			}
			if err := fresh.replayRecord(e.Index, rec, parts); err != nil {
				return err
			}
		}
		fresh.done = e.Index
		return nil
	})
	if err != nil {
		return fmt.Errorf("kinesisload: replaying the journal: %w", err)
	}
	s.streams, s.done, s.lastSnap, s.applied = fresh.streams, fresh.done, fresh.lastSnap, map[uint64]bool{}
	return nil
}

func (s *JournalStore) apply(rec storeRecord) {
	shards := s.streams[rec.Stream]
	if shards == nil {
		shards = map[string]ShardProgress{}
		s.streams[rec.Stream] = shards
	}
	for _, u := range rec.Updates {
		shards[u.ShardID] = merge(shards[u.ShardID], u)
	}
	for _, id := range rec.Prune {
		delete(shards, id)
	}
}

// Load implements [PositionStore].
func (s *JournalStore) Load(ctx context.Context, stream string) (map[string]ShardProgress, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]ShardProgress, len(s.streams[stream]))
	for id, p := range s.streams[stream] {
		p.Parents = append([]string(nil), p.Parents...)
		out[id] = p
	}
	return out, nil
}

// Save implements [PositionStore]. Concurrent saves share the journal's
// fsync. A Save too large for one journal record is written as several
// part records followed by one commit record; replay applies the parts
// only when their commit is there, so the Save stays all or nothing.
func (s *JournalStore) Save(ctx context.Context, stream string, updates []ShardProgress) error {
	if len(updates) == 0 {
		return nil
	}
	for _, u := range updates {
		if u.ShardID == "" {
			return fmt.Errorf("kinesisload: save to stream %s: an update has no shard ID", stream)
		}
		if u.Position.Kind != 0 {
			if err := u.Position.Validate(); err != nil {
				return fmt.Errorf("kinesisload: save to stream %s, shard %s: %w", stream, u.ShardID, err)
			}
		}
	}
	return s.write(ctx, stream, storeRecord{Stream: stream, Updates: updates})
}

// write makes rec durable, as one record or as parts and a commit, applies
// it to the state and takes a snapshot when one is due.
func (s *JournalStore) write(ctx context.Context, stream string, rec storeRecord) error {
	s.mu.Lock()
	s.inflight++
	limit := s.partBytes
	s.mu.Unlock()
	indexes, err := s.appendRecord(ctx, rec, limit)
	s.mu.Lock()
	s.inflight--
	if err != nil {
		// The outcome is unknown: the record may be durable under an
		// index this store will never see acknowledged, which would hold
		// every later snapshot back (so would the parts of a batch whose
		// commit failed). Rebuild from the journal once no other Save is
		// in flight.
		s.stale = true
		s.mu.Unlock()
		return fmt.Errorf("kinesisload: save to stream %s: %w", stream, err)
	}
	s.apply(rec)
	for _, idx := range indexes {
		s.applied[idx] = true
	}
	for s.applied[s.done+1] {
		delete(s.applied, s.done+1)
		s.done++
	}
	if s.stale && s.inflight == 0 {
		if rerr := s.replay(ctx); rerr == nil {
			s.stale = false
		} // else keep the state as it was, and try again at the next Save
	}
	var snap []byte
	at := s.done
	if at-s.lastSnap >= s.every && !s.snapping {
		snap, err = json.Marshal(storeSnapshot{Streams: s.streams})
		s.snapping = err == nil
	}
	s.mu.Unlock()
	if snap == nil {
		return nil
	}
	// The state may include records above at; replaying them again after
	// the snapshot is harmless because merge is idempotent. The updates
	// are durable whatever happens to the snapshot, so its failure is not
	// this Save's: the next Save past the threshold tries again, and a
	// journal that cannot write fails that Save's append.
	err = s.j.Snapshot(ctx, at, snap)
	s.mu.Lock()
	s.snapping = false
	if err == nil {
		s.lastSnap = at
	}
	s.mu.Unlock()
	return nil
}

// Streams returns the names of the streams that have stored progress, for
// tools that inspect a store.
func (s *JournalStore) Streams() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.streams)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
