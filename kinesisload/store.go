package kinesisload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/journal"
)

// PositionStore is the durable per-shard progress of the Loader: lineage,
// state and position of every shard it tracks, with the identity of the
// stream it was made on ([StreamIdentity]) and the archived progress of
// streams re-created since. The default, [JournalStore], keeps it in a
// [journal.Journal].
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

	// Identity returns the identity of the stream whose progress Load
	// returns: the zero StreamIdentity, not an error, when none is stored
	// (nothing is stored yet, or the progress was stored before
	// identities were).
	Identity(ctx context.Context, stream string) (StreamIdentity, error)

	// SetIdentity durably records id as the identity of stream's
	// progress. The Loader calls it before it saves anything on a first
	// run, and once on progress stored without an identity (it adopts the
	// stream's current one). It does nothing when id is stored already,
	// and fails with a [*StreamMismatchError], changing nothing, when
	// another identity is stored: only StartOver replaces one.
	SetIdentity(ctx context.Context, stream string, id StreamIdentity) error

	// StartOver durably and atomically archives stream's progress with
	// its identity, and leaves the stream with identity id and no
	// progress: Load then returns an empty map, as on a first run. The
	// archived progress is kept, never deleted. A Save of the old
	// stream's progress that races with StartOver goes to the archive,
	// not to the new stream. StartOver does nothing when id is the stored
	// identity already. The store of a fleet coordinator moves the whole
	// fleet to a new generation and then returns an error wrapping a
	// [*StreamMismatchError]: see [Membership.Store].
	StartOver(ctx context.Context, stream string, id StreamIdentity) error
}

// ArchivedProgress is the progress of a stream that was deleted and
// created again under its name, as StartOver kept it.
type ArchivedProgress struct {
	// Identity is the old stream's identity (zero when its progress was
	// stored before identities were).
	Identity StreamIdentity `json:"identity,omitzero"`
	// ReplacedBy is the identity of the stream that replaced it.
	ReplacedBy StreamIdentity `json:"replaced_by"`
	// Shards is the old stream's progress, keyed by shard ID.
	Shards map[string]ShardProgress `json:"shards"`
}

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
	meta    map[string]*streamMeta
	starts  map[string]time.Time // pending T0 by stream; see StartStore
	// rewinds holds the last rewind of each shard, by stream (see
	// rewind.go).
	rewinds map[string]map[string]Rewind
	// excl is held shared by every write and exclusively by a Rewind,
	// so that a rewind, which replaces positions, is never applied in
	// another order than the journal's.
	excl sync.RWMutex
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
// one record, the commit of such a Save, a prune (see storebatch.go), or a
// SetIdentity or StartOver. A record with none of the batch fields is a
// whole Save, as every record was before batches existed; a record without
// Gen is of generation 0, as every record was before identities were
// journaled.
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
	// Gen is how many times the stream had been started over when the
	// record was written: updates of an archived generation go to its
	// archive, never to the stream that replaced it. A commit carries the
	// Gen of its parts.
	Gen int `json:"gen,omitempty"`
	// Identity is the stream's identity, set by SetIdentity and StartOver.
	Identity *StreamIdentity `json:"identity,omitempty"`
	// StartOver archives generation Gen and starts generation Gen+1 with
	// Identity.
	StartOver bool `json:"start_over,omitempty"`
	// T0 is the start time a SaveStart journaled for the stream (kept if
	// one is pending already); T0Done clears it. Journals written before
	// T0 existed have neither, and load as before.
	T0     *time.Time `json:"t0,omitempty"`
	T0Done bool       `json:"t0done,omitempty"`
	// Rewinds replace the positions of their shards (JournalStore.Rewind);
	// RewindAcks clear their SinkPending. Journals written before rewinds
	// existed have neither.
	Rewinds    []Rewind    `json:"rewinds,omitempty"`
	RewindAcks []rewindAck `json:"rewind_acks,omitempty"`
}

// streamMeta is what a JournalStore keeps of a stream besides its
// progress: its identity and its archives, one per start-over, so that
// len(Archives) is the current generation.
type streamMeta struct {
	Identity StreamIdentity     `json:"identity,omitzero"`
	Archives []ArchivedProgress `json:"archives,omitempty"`
}

// storeSnapshot is the whole state. A snapshot written before identities
// were journaled has no Meta.
type storeSnapshot struct {
	Streams map[string]map[string]ShardProgress `json:"streams"`
	Meta    map[string]*streamMeta              `json:"meta,omitempty"`
	Starts  map[string]time.Time                `json:"t0,omitempty"`
	Rewinds map[string]map[string]Rewind        `json:"rewinds,omitempty"`
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
	fresh := &JournalStore{streams: map[string]map[string]ShardProgress{}, meta: map[string]*streamMeta{}, starts: map[string]time.Time{}, rewinds: map[string]map[string]Rewind{}}
	// Parts of batches whose commit has not been replayed yet; those
	// never committed are dropped at the end.
	parts := map[string][]storeRecord{}
	err := s.j.Replay(ctx, func(e journal.Entry) error {
		if e.Snapshot {
			var snap storeSnapshot
			if err := strictUnmarshal(e.Data, &snap); err != nil {
				return fmt.Errorf("%w: snapshot at index %d: %v%s", ErrStoreCorrupt, e.Index, err, newerHint(err))
			}
			if snap.Streams != nil {
				fresh.streams = snap.Streams
			}
			fresh.meta = map[string]*streamMeta{}
			for name, m := range snap.Meta {
				if m != nil {
					fresh.meta[name] = m
				}
			}
			fresh.starts = map[string]time.Time{}
			maps.Copy(fresh.starts, snap.Starts)
			fresh.rewinds = map[string]map[string]Rewind{}
			maps.Copy(fresh.rewinds, snap.Rewinds)
			fresh.lastSnap = e.Index
		} else {
			var rec storeRecord
			if err := strictUnmarshal(e.Data, &rec); err != nil {
				return fmt.Errorf("%w: record %d: %v%s", ErrStoreCorrupt, e.Index, err, newerHint(err))
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
	s.streams, s.meta, s.starts, s.rewinds, s.done, s.lastSnap, s.applied = fresh.streams, fresh.meta, fresh.starts, fresh.rewinds, fresh.done, fresh.lastSnap, map[uint64]bool{}
	return nil
}

// strictUnmarshal decodes a journaled record or snapshot, refusing a field
// this version does not know: a later version's journal is refused, never
// half understood (a rewind or a reset it cannot see would be replayed as
// if it were not there). Every field of the records has only ever been
// added, so every journal an earlier version wrote decodes.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// newerHint says what a field this version does not know likely means.
func newerHint(err error) string {
	if strings.Contains(err.Error(), "unknown field") {
		return " (written by a later version of tidemark? run that version, or restore the journal from before it)"
	}
	return ""
}

// apply applies one record. It is idempotent, like merge: a snapshot may
// hold records that are replayed again after it. s.mu must be held.
func (s *JournalStore) apply(rec storeRecord) {
	shards := s.streams[rec.Stream]
	if shards == nil {
		shards = map[string]ShardProgress{}
		s.streams[rec.Stream] = shards
	}
	m := s.metaOf(rec.Stream)
	gen := len(m.Archives)
	switch {
	case rec.StartOver && rec.Gen == gen && rec.Identity != nil:
		m.Archives = append(m.Archives, ArchivedProgress{Identity: m.Identity, ReplacedBy: *rec.Identity, Shards: shards})
		m.Identity = *rec.Identity
		shards = map[string]ShardProgress{}
		s.streams[rec.Stream] = shards
		delete(s.rewinds, rec.Stream) // the old stream's, archived with it
		// The new stream arrived wholly after the first Run's T0: its
		// start-up resolves at StartOverT0 (LATEST is its beginning).
		s.starts[rec.Stream] = StartOverT0(*rec.Identity)
	case rec.StartOver:
		// Applied already (the snapshot holds it).
	case rec.Identity != nil && rec.Gen >= 0 && rec.Gen < gen:
		if a := &m.Archives[rec.Gen]; a.Identity.IsZero() {
			a.Identity = *rec.Identity
		}
	case rec.Identity != nil:
		m.Identity = *rec.Identity
	}
	archived := rec.Gen >= 0 && rec.Gen < gen && !rec.StartOver
	if archived {
		// A Save of a stream that was started over since: its archive.
		shards = m.Archives[rec.Gen].Shards
	}
	for _, u := range rec.Updates {
		shards[u.ShardID] = merge(shards[u.ShardID], u)
	}
	for _, id := range rec.Prune {
		delete(shards, id)
		if !archived {
			delete(s.rewinds[rec.Stream], id) // never read again: nothing to settle
		}
	}
	s.applyRewinds(rec, shards, gen)
	switch _, pending := s.starts[rec.Stream]; {
	case rec.T0Done:
		delete(s.starts, rec.Stream)
	case rec.T0 != nil && !pending:
		s.starts[rec.Stream] = rec.T0.UTC()
	}
}

// metaOf returns the meta of stream, making it; s.mu must be held.
func (s *JournalStore) metaOf(stream string) *streamMeta {
	m := s.meta[stream]
	if m == nil {
		m = &streamMeta{}
		s.meta[stream] = m
	}
	return m
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
	s.mu.Lock()
	rec := storeRecord{Stream: stream, Updates: updates, Gen: s.gen(stream)}
	s.mu.Unlock()
	return s.write(ctx, stream, rec)
}

// gen returns the stream's generation: how many times it was started
// over. s.mu must be held.
func (s *JournalStore) gen(stream string) int {
	if m := s.meta[stream]; m != nil {
		return len(m.Archives)
	}
	return 0
}

// write makes rec durable, as one record or as parts and a commit, applies
// it to the state and takes a snapshot when one is due.
func (s *JournalStore) write(ctx context.Context, stream string, rec storeRecord) error {
	s.excl.RLock()
	defer s.excl.RUnlock()
	return s.writeRecord(ctx, stream, rec)
}

// writeRecord is write; s.excl must be held (shared, or exclusively by a
// Rewind).
func (s *JournalStore) writeRecord(ctx context.Context, stream string, rec storeRecord) error {
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
		snap, err = json.Marshal(storeSnapshot{Streams: s.streams, Meta: s.meta, Starts: s.starts, Rewinds: s.rewinds})
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

// Identity implements [PositionStore].
func (s *JournalStore) Identity(ctx context.Context, stream string) (StreamIdentity, error) {
	if err := ctx.Err(); err != nil {
		return StreamIdentity{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.meta[stream]; m != nil {
		return m.Identity, nil
	}
	return StreamIdentity{}, nil
}

// SetIdentity implements [PositionStore]: one journal record.
func (s *JournalStore) SetIdentity(ctx context.Context, stream string, id StreamIdentity) error {
	if id.IsZero() {
		return fmt.Errorf("kinesisload: stream %s: SetIdentity with the zero StreamIdentity", stream)
	}
	s.mu.Lock()
	var stored StreamIdentity
	if m := s.meta[stream]; m != nil {
		stored = m.Identity
	}
	rec := storeRecord{Stream: stream, Gen: s.gen(stream), Identity: &id}
	s.mu.Unlock()
	switch {
	case stored.Equal(id):
		return nil
	case !stored.IsZero():
		return &StreamMismatchError{Stream: stream, Stored: stored, Current: id}
	}
	return s.write(ctx, stream, rec)
}

// StartOver implements [PositionStore]: one journal record, which moves
// the progress into an archive (see [JournalStore.Archives]) and leaves
// [StartOverT0] of id pending (see [StartStore]).
func (s *JournalStore) StartOver(ctx context.Context, stream string, id StreamIdentity) error {
	if id.IsZero() {
		return fmt.Errorf("kinesisload: stream %s: StartOver with the zero StreamIdentity", stream)
	}
	s.mu.Lock()
	var stored StreamIdentity
	if m := s.meta[stream]; m != nil {
		stored = m.Identity
	}
	rec := storeRecord{Stream: stream, Gen: s.gen(stream), Identity: &id, StartOver: true}
	s.mu.Unlock()
	if stored.Equal(id) {
		return nil
	}
	return s.write(ctx, stream, rec)
}

// Archives returns the progress archived by StartOver for stream, oldest
// first, for tools that inspect a store: none when the stream was never
// started over. The caller may modify what it gets.
func (s *JournalStore) Archives(stream string) []ArchivedProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.meta[stream]
	if m == nil {
		return nil
	}
	out := make([]ArchivedProgress, len(m.Archives))
	for i, a := range m.Archives {
		a.Shards = maps.Clone(a.Shards)
		for id, p := range a.Shards {
			p.Parents = slices.Clone(p.Parents)
			a.Shards[id] = p
		}
		out[i] = a
	}
	return out
}

// Streams returns the names of the streams that have stored progress or
// an identity, for tools that inspect a store.
func (s *JournalStore) Streams() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.streams)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
