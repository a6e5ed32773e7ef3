package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// sharedStore is the shared progress of a stream, through one member: its
// Load shows what is committed, its Save merges into the shard items.
// fresh makes every Load read the partition (an initialisation's: it must
// see what another host committed a moment ago).
type sharedStore struct {
	m     *member
	fresh bool
}

var (
	_ kinesisload.PositionStore = sharedStore{}
	_ kinesisload.Pruner        = sharedStore{}
	_ kinesisload.StartedStore  = sharedStore{}
)

func (st sharedStore) check(ctx context.Context, stream string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stream != st.m.stream {
		return fmt.Errorf("fleet: the membership of stream %s used for stream %s", st.m.stream, stream)
	}
	return nil
}

// currentView returns the member's view of the shard items and the
// committed batch when the rounds keep it current: the initialisation
// committed, every change the roster announced read (by the hinted items,
// or the whole partition), and the whole partition read within
// ResyncInterval. It is as old as the last roster the member read (a
// round), and what no host announces (an item edited by hand) is in it
// within ResyncInterval.
func (m *member) currentView() (map[string]*shardItem, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := m.shards != nil && m.committed != "" && !m.needRead && len(m.toGet) == 0 &&
		m.c.now().Sub(m.lastRead) < m.c.cfg.ResyncInterval && !m.left && m.over == nil
	return m.shards, m.committed, ok
}

// snapshot reads the stream's partition, retrying transient errors, and
// takes it as the member's view.
func (m *member) snapshot(ctx context.Context) (*snapshot, error) {
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		seq := m.beginRead()
		m.mu.Unlock()
		snap, err := query(ctx, m.c.table, m.part)
		if err == nil {
			m.mu.Lock()
			if snap.init.committed != "" {
				m.committed = snap.init.committed
			}
			m.endRead(seq, snap.shards)
			// A whole read, as a round's: what it shows is acted on
			// (a lease the table gave another owner or epoch is lost;
			// a host's changes are seen), for the rounds then skip
			// their own read until ResyncInterval passes again.
			m.lastRead = m.c.now()
			m.toGet = nil
			m.observe(snap.roster)
			m.observeOld(snap.old)
			m.absorb(nil)
			snap.shards = m.shards // with our writes since it began, or newer
			m.mu.Unlock()
			return snap, nil
		}
		m.mu.Lock()
		m.endRead(seq, nil)
		m.mu.Unlock()
		if fatal(err) {
			return nil, fmt.Errorf("fleet: stream %s: reading the table: %w", m.stream, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, fmt.Errorf("fleet: stream %s: reading the table: %w", m.stream, err)
		}
	}
}

// Load implements [kinesisload.PositionStore]: the member's view of the
// shard items when the rounds keep it current (see currentView), otherwise
// one read of the stream's partition; only the committed initialisation
// batch's positions count. The positions are those of the shard items: a
// shard's owner may be further, in its positions (a lease's Progress says
// where it resumes).
func (st sharedStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	if err := st.check(ctx, stream); err != nil {
		return nil, err
	}
	shards, committed, ok := st.m.currentView()
	if !ok || st.fresh {
		snap, err := st.m.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		shards, committed = snap.shards, snap.init.committed
	}
	out := map[string]kinesisload.ShardProgress{}
	for id, s := range shards {
		p := s.visible(committed)
		if pendingOnly(p) {
			continue // invisible
		}
		if st.m.unreadChildOfOpenParent(shards, committed, s, p) {
			p.State = kinesisload.StatePendingParent
		}
		out[id] = p
	}
	return out, nil
}

// unreadChildOfOpenParent reports whether s (whose progress is p) is
// ACTIVE at a start (TRIM_HORIZON, as a child begins, or a timestamp; not
// a sequence number, which an import or a rewind may have set after a
// read) but was never owned, while a parent of its item in
// the table is not COMPLETED. No host read it (leasable grants no lease on
// such a child), so it is loaded as waiting for its parents: a host with a
// stale view of a parent (a parent's item deleted by hand and saved again
// by another host) may have activated it, and the Loader must not take it
// for a read child and refuse to read the parent (found by the
// simulation, seed 30015576).
func (m *member) unreadChildOfOpenParent(shards map[string]*shardItem, committed string, s *shardItem, p kinesisload.ShardProgress) bool {
	atStart := p.Position.Kind == scan.KindTrimHorizon || p.Position.Kind == scan.KindAtTimestamp
	return p.State == kinesisload.StateActive && atStart && s.owner == "" && !s.everOwned(m.gen) && parentOpen(shards, committed, p)
}

// Started implements [kinesisload.StartedStore]: the fleet's
// initialisation committed, as the table says or as this member read it
// before (Initialise runs a start-up on this store only then): an init
// item deleted by hand since does not make the stream new (seed
// 248600504: the Loader resolved LATEST at a T0 of its own, and what
// arrived since the last position committed was never read).
func (st sharedStore) Started(ctx context.Context, stream string) (bool, error) {
	if err := st.check(ctx, stream); err != nil {
		return false, err
	}
	snap, err := st.m.snapshot(ctx)
	if err != nil {
		return false, err
	}
	st.m.mu.Lock()
	seen := st.m.committed != ""
	st.m.mu.Unlock()
	return snap.init.committed != "" || seen, nil
}

// Save implements [kinesisload.PositionStore]: each update is merged into
// its shard's item by a conditional write (on the item's version, from
// the member's view or a read of that item alone); an update that changes
// nothing is not written. An update without a position for a shard whose
// item is gone (deleted by hand) is not written either: the others are,
// and Save returns a [*kinesisload.MissingShardError] naming it.
func (st sharedStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	var missing []string
	err := st.m.saveEach(ctx, updates, func(s *shardItem, committed string, u kinesisload.ShardProgress) *shardItem {
		if !s.exists() && u.Position.Kind == 0 {
			// The item is gone (deleted by hand), and u cannot
			// stand for it: an item of a state alone, without a
			// position, would be read from nowhere.
			if !slices.Contains(missing, u.ShardID) {
				missing = append(missing, u.ShardID)
			}
			return nil
		}
		missing = slices.DeleteFunc(missing, func(id string) bool { return id == u.ShardID })
		if (u.Position.Kind != 0 || u.State > kinesisload.StateActive) && st.m.rewoundSince(s) {
			// Rewound since the Loader read the rewinds: what it
			// read before (the Sink's checkpoints) does not undo the
			// rewind, neither its position nor an end reached there
			// (the rewind reads it again). An activation and parents
			// count.
			st.m.c.cfg.Logger.Info("fleet: a position saved for a shard rewound meanwhile is left out: the rewind's stands",
				"stream", st.m.stream, "shard", u.ShardID, "position", u.Position, "state", u.State)
			u.Position = scan.Position{}
			u.State = min(u.State, kinesisload.StateActive)
		}
		v := s.visible(committed)
		nv := kinesisload.MergeProgress(v, u)
		if s.exists() && same(nv, v) {
			return nil
		}
		next := s.with(nv, committed)
		if !s.exists() {
			next.epoch = createEpoch(st.m.gen, st.m.c.now())
			next.base = next.epoch
		}
		return next
	})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return &kinesisload.MissingShardError{Stream: stream, Shards: missing}
	}
	return nil
}

// saveEach applies mutate to the item of every update, and records one
// change for all it wrote (also when a later one fails).
func (m *member) saveEach(ctx context.Context, updates []kinesisload.ShardProgress, mutate func(s *shardItem, committed string, u kinesisload.ShardProgress) *shardItem) error {
	for _, u := range updates {
		if u.ShardID == "" {
			return fmt.Errorf("fleet: save to stream %s: an update has no shard ID", m.stream)
		}
	}
	var wrote []string
	defer func() {
		if len(wrote) > 0 {
			m.changed(wrote...)
		}
	}()
	for _, u := range updates {
		err := m.updateWaiting(ctx, u.ShardID, "save", func(s *shardItem) *shardItem {
			m.mu.Lock()
			committed := m.committed
			m.mu.Unlock()
			next := mutate(s, committed, u)
			if next != nil && !slices.Contains(wrote, u.ShardID) {
				wrote = append(wrote, u.ShardID) // tried: it may have landed
			}
			return next
		})
		if err != nil {
			return fmt.Errorf("fleet: save to stream %s: shard %s: %w", m.stream, u.ShardID, err)
		}
	}
	return nil
}

// updateWaiting is update, with a table failing for a while (an outage,
// throttles: update gives up after its attempts) waited out, as the
// heartbeats wait it out: the Loader does not stop for it. It ends with
// ctx (a Close), or an error no retry fixes. what names the write in the
// log.
func (m *member) updateWaiting(ctx context.Context, id, what string, mutate func(*shardItem) *shardItem) error {
	for tries := 1; ; tries++ {
		err := m.update(ctx, id, nil, mutate)
		if err == nil || !errors.Is(err, errGaveUp) || ctx.Err() != nil {
			return err
		}
		m.c.cfg.Logger.Warn("fleet: the table keeps failing; still trying to "+what, "stream", m.stream, "shard", id, "tries", tries, "err", err)
	}
}

// Prune implements [kinesisload.Pruner]: the items of COMPLETED shards
// are deleted (on condition of their version), so that a stream that
// reshards every day does not grow every read.
func (st sharedStore) Prune(ctx context.Context, stream string, shardIDs []string) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	m := st.m
	var pruned []string
	for _, id := range shardIDs {
		for attempt := 0; ; attempt++ {
			got, err := m.c.table.Get(ctx, m.part, prefixShard+id)
			if err == nil {
				var s *shardItem
				if s, err = decodeShard(got); err == nil {
					m.mu.Lock()
					committed := m.committed
					m.mu.Unlock()
					if !s.exists() || s.visible(committed).State != kinesisload.StateCompleted {
						break // gone, or not complete: kept
					}
					if err = m.c.table.Delete(ctx, m.part, got.Key, got.Version); err == nil {
						pruned = append(pruned, id)
						m.mu.Lock()
						m.setShard(id, nil)
						m.mu.Unlock()
						break
					}
				}
			}
			if fatal(err) {
				return fmt.Errorf("fleet: stream %s: pruning shard %s: %w", m.stream, id, err)
			}
			if attempt >= 8 {
				return fmt.Errorf("fleet: stream %s: pruning shard %s: gave up after %d attempts: %w", m.stream, id, attempt, err)
			}
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
	}
	if len(pruned) > 0 {
		m.changed(pruned...)
	}
	return nil
}

// Identity implements [kinesisload.PositionStore]: the stream's identity
// item, when its generation is the session's; when the fleet started over
// since, an error wrapping a [*kinesisload.StreamMismatchError].
func (st sharedStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	if err := st.check(ctx, stream); err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	m := st.m
	ii, err := m.readIdentityInForce(ctx)
	if err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	if !ii.item.Exists() && m.gen > 0 {
		// Generation 0 reads an absent item as a stream not identified
		// yet; a later one was started over by writing it.
		return kinesisload.StreamIdentity{}, fmt.Errorf("%w: stream %s: this session is of generation %d, written in the identity item (key %q) when the fleet started over, "+
			"and the item is gone (deleted by hand?): restore it naming the stream the fleet reads and \"gen\" = %d, "+
			"for example from an export made before, or from Coordinator.Inspect of a host still running",
			ErrIdentityMissing, stream, m.gen, keyIdentity, m.gen)
	}
	if ii.gen != m.gen {
		m.mu.Lock()
		m.voidWith(ii)
		m.behindLocked(ii)
		over := m.over
		m.mu.Unlock()
		if over == nil {
			over = fmt.Errorf("fleet: stream %s: the identity item names generation %d, the session is of %d", stream, ii.gen, m.gen)
		}
		return kinesisload.StreamIdentity{}, over
	}
	return ii.id, nil
}

// SetIdentity implements [kinesisload.PositionStore]: a conditional write
// of the identity item (it must be absent, in the session's generation),
// then a read to compare.
func (st sharedStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return st.setIdentity(ctx, stream, id, time.Time{})
}

// setIdentity is SetIdentity, writing t0 (generation 0's T0, when not
// zero) into the identity item with the identity, or into an identity
// item of generation 0 that has none.
func (st sharedStore) setIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity, t0 time.Time) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("fleet: stream %s: SetIdentity with the zero StreamIdentity", stream)
	}
	m := st.m
	for attempt := 0; ; attempt++ {
		ii, err := m.readIdentityInForce(ctx)
		if err != nil {
			return err
		}
		if ii.gen != m.gen {
			_, err := st.Identity(ctx, stream)
			return err
		}
		keepT0 := m.gen == 0 && ii.t0.IsZero() && !t0.IsZero()
		if !ii.id.IsZero() {
			if !ii.id.Equal(id) {
				return &kinesisload.StreamMismatchError{Stream: stream, Stored: ii.id, Current: id}
			}
			if !keepT0 {
				return nil
			}
		}
		next := ii
		next.id = id
		if keepT0 {
			next.t0 = t0.UTC()
		}
		cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
		_, err = m.c.table.Put(cctx, next.encode(stream))
		cancel()
		switch {
		case err == nil:
			return nil
		case fatal(err):
			return fmt.Errorf("fleet: stream %s: writing the identity item: %w", stream, err)
		case errors.Is(err, ErrUnknown):
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		// Condition failed or unknown: the read at the top decides.
	}
}

// StartOver implements [kinesisload.PositionStore] for a fleet: one
// conditional write of the identity item, from (the stored identity, the
// session's generation) to (id, the next generation), then a mark in the
// old generation's roster that every host of it reads at its next
// heartbeat (a host reads the identity item too, within ResyncInterval).
// Whoever wins, the session's generation is over: StartOver returns an
// error wrapping a [*kinesisload.StreamMismatchError] (the Loader starts a
// new session, which joins the new generation and initialises it through
// its lock, as a first run), and every lease of the session is void. The
// old generation's items stay as they are, its archive
// ([Coordinator.Inspect] shows them). StartOver does nothing when id is
// the stored identity of the session's generation, and refuses an id
// created no later than the stored one (a host whose view of the stream is
// older than the fleet's must not move it back).
func (st sharedStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("fleet: stream %s: StartOver with the zero StreamIdentity", stream)
	}
	m := st.m
	for attempt := 0; ; attempt++ {
		ii, err := m.readIdentity(ctx)
		if err != nil {
			return err
		}
		switch {
		case ii.gen != m.gen:
			m.markOver(ctx, ii.gen)
			_, err := st.Identity(ctx, stream)
			return err
		case ii.id.Equal(id):
			return nil
		case !ii.id.IsZero() && !id.Created.After(ii.id.Created):
			return fmt.Errorf("fleet: stream %s: start over on %s refused: the fleet's generation %d reads %s, created later or at once "+
				"(a host may start the fleet over only on a stream created after the one it reads)", stream, id, ii.gen, ii.id)
		}
		// The next generation must be new: an item restored from a
		// backup older than a start-over would move the fleet into a
		// generation initialised on another stream, and read this one
		// from that one's positions.
		if err := checkBehind(ctx, m.c.table, stream, ii); errors.Is(err, errGenMoved) {
			continue
		} else if err != nil {
			return err
		}
		next := identityItem{item: ii.item, id: id, gen: ii.gen + 1,
			archived: append(slices.Clone(ii.archived), Generation{Gen: ii.gen, Identity: ii.id, ReplacedBy: id})}
		cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
		_, err = m.c.table.Put(cctx, next.encode(stream))
		cancel()
		if fatal(err) {
			return fmt.Errorf("fleet: stream %s: writing the identity item: %w", stream, err)
		}
		if errors.Is(err, ErrUnknown) {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		// Landed, refused or unknown: the read at the top tells which
		// generation is in force.
	}
}

// markOver writes the mark of generation next into the session's
// generation's roster (see StartOver), a few tries; the hosts of the old
// generation read the identity item within ResyncInterval anyway.
func (m *member) markOver(ctx context.Context, next uint64) {
	for attempt := range 3 {
		cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
		it, err := m.c.table.Get(cctx, m.part, keyRoster)
		if err == nil {
			var r roster
			if r, err = decodeRoster(it); err == nil {
				if r.next >= next {
					cancel()
					return
				}
				old := ""
				if r.next > 0 {
					old = fmt.Sprint(r.next)
				}
				_, err = m.c.table.SetEntry(cctx, m.part, keyRoster, fieldBeats, entryGen, old, fmt.Sprint(next))
			}
		}
		cancel()
		if err == nil || fatal(err) || sleep(ctx, backoff(attempt)) != nil {
			return
		}
	}
}

// stagingStore is the store of the host that holds the initialisation
// lock: Load shows what is committed; Save writes pending positions under
// the lock's token, visible only once the commit names it. Its
// InitProgress counts the holder's signs of progress.
type stagingStore struct {
	m        *member
	batch    string
	progress *atomic.Uint64
}

var (
	_ kinesisload.PositionStore  = stagingStore{}
	_ kinesisload.StartStore     = stagingStore{}
	_ kinesisload.InitProgresser = stagingStore{}
)

// InitProgress implements [kinesisload.InitProgresser].
func (st stagingStore) InitProgress() { st.progress.Add(1) }

func (st stagingStore) shared() sharedStore { return sharedStore{m: st.m, fresh: true} }

// Load implements [kinesisload.PositionStore] (as the shared store).
func (st stagingStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	st.InitProgress()
	return st.shared().Load(ctx, stream)
}

// Save implements [kinesisload.PositionStore]: pending positions under
// the lock's token.
func (st stagingStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	if err := st.shared().check(ctx, stream); err != nil {
		return err
	}
	st.InitProgress()
	return st.m.saveEach(ctx, updates, func(s *shardItem, _ string, u kinesisload.ShardProgress) *shardItem {
		st.InitProgress()
		p, ok := s.pend[st.batch]
		p.ShardID = u.ShardID
		np := kinesisload.MergeProgress(p, u)
		if ok && same(np, p) {
			return nil
		}
		next := *s
		next.pend = make(map[string]kinesisload.ShardProgress, len(s.pend)+1)
		for k, v := range s.pend {
			next.pend[k] = v
		}
		next.pend[st.batch] = np
		if !s.exists() {
			// An initialisation may be a second one (the init item
			// deleted by hand), and this item one deleted with it,
			// whose leases a host may still hold: see epochFloor.
			next.epoch = createEpoch(st.m.gen, st.m.c.now())
			next.base = next.epoch
		}
		return &next
	})
}

// LoadStart implements [kinesisload.StartStore]: the t0 of the init item,
// saved by this or an earlier holder of the initialisation lock; in
// generation 0 when the init item has none (deleted by hand since), the
// t0 the first initialisation wrote into the identity item; in a
// generation started over that none saved, [kinesisload.StartOverT0] of
// its stream.
func (st stagingStore) LoadStart(ctx context.Context, stream string) (time.Time, bool, error) {
	m := st.m
	if err := st.shared().check(ctx, stream); err != nil {
		return time.Time{}, false, err
	}
	it, err := getWaiting(ctx, m.c.table, m.part, keyInit)
	if err != nil {
		if fatal(err) {
			return time.Time{}, false, fmt.Errorf("fleet: stream %s: reading the initialisation item: %w", stream, err)
		}
		return time.Time{}, false, err
	}
	ii, err := decodeInit(it)
	if err != nil {
		return time.Time{}, false, err
	}
	if ii.t0.IsZero() && m.gen == 0 {
		// The init item deleted by hand (and written again by a lock
		// since): the first initialisation's T0 is in the identity item.
		id, err := m.readIdentity(ctx)
		if err != nil {
			return time.Time{}, false, err
		}
		if !id.t0.IsZero() {
			return id.t0, true, nil
		}
	}
	if ii.t0.IsZero() && m.gen > 0 {
		// The start-over's T0 comes from the identity item: one
		// missing (deleted by hand) or of a later generation is an
		// error, never "no T0 yet", which would resolve LATEST at a
		// fresh T0 and skip what the new stream received since it was
		// created.
		id, err := st.shared().Identity(ctx, stream)
		if err != nil {
			return time.Time{}, false, err
		}
		return kinesisload.StartOverT0(id), true, nil
	}
	return ii.t0, !ii.t0.IsZero(), nil
}

// SaveStart implements [kinesisload.StartStore]: t0 is written into the
// init item unless one is pending, on condition that the lock is still
// ours and nothing is committed. When the lock is another host's, a
// [*kinesisload.LeaseLostError].
func (st stagingStore) SaveStart(ctx context.Context, stream string, t0 time.Time) (time.Time, error) {
	m := st.m
	if err := st.shared().check(ctx, stream); err != nil {
		return time.Time{}, err
	}
	if t0.IsZero() {
		return time.Time{}, fmt.Errorf("fleet: stream %s: SaveStart with the zero time", stream)
	}
	st.InitProgress()
	if pending, ok, err := st.LoadStart(ctx, stream); err != nil || ok {
		return pending, err
	}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
		it, err := m.c.table.Get(cctx, m.part, keyInit)
		var ii initItem
		if err == nil {
			ii, err = decodeInit(it)
		}
		if err == nil {
			switch {
			case ii.lockToken != st.batch || ii.committed != "":
				cancel()
				return time.Time{}, &kinesisload.LeaseLostError{Stream: m.stream, Why: kinesisload.LostCommitRefused,
					Reason: "another host took the initialisation lock or committed before the start time was saved"}
			case !ii.t0.IsZero():
				cancel()
				return ii.t0, nil // landed, or another holder's
			}
			ii.t0 = t0.UTC()
			_, err = m.c.table.Put(cctx, ii.encode(m.part))
			if err == nil {
				cancel()
				return ii.t0, nil
			}
		}
		cancel()
		if fatal(err) {
			return time.Time{}, fmt.Errorf("fleet: stream %s: saving the start time: %w", stream, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return time.Time{}, err
		}
	}
}

// ClearStart implements [kinesisload.StartStore]: nothing is written. The
// t0 stays in the init item, where only a holder of the lock before the
// commit reads it (the commit makes it moot), so that a host taking over
// from one that died after ClearStart still resolves at it.
func (st stagingStore) ClearStart(ctx context.Context, stream string) error {
	return st.shared().check(ctx, stream)
}

// Identity implements [kinesisload.PositionStore] (as the shared store).
func (st stagingStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	return st.shared().Identity(ctx, stream)
}

// SetIdentity implements [kinesisload.PositionStore] (as the shared
// store: every host of the fleet sees the same stream, so it is
// idempotent), with the initialisation's T0, pending in the init item, in
// generation 0: the identity item keeps it should the init item be deleted
// by hand (see LoadStart).
func (st stagingStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	st.InitProgress()
	var t0 time.Time
	if st.m.gen == 0 {
		it, err := getWaiting(ctx, st.m.c.table, st.m.part, keyInit)
		if err != nil {
			if fatal(err) {
				return fmt.Errorf("fleet: stream %s: reading the initialisation item: %w", stream, err)
			}
			return err
		}
		ii, err := decodeInit(it)
		if err != nil {
			return err
		}
		t0 = ii.t0
	}
	return st.shared().setIdentity(ctx, stream, id, t0)
}

// StartOver implements [kinesisload.PositionStore] (as the shared store).
func (st stagingStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return st.shared().StartOver(ctx, stream, id)
}
