package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// This file is a host's balance round: read the shard items when a host
// changed something (or ResyncInterval passed), lose the leases another
// host holds now, answer handoff requests, take free shards up to the fair
// share, and ask for shards from the most loaded host. When nothing
// changed a round makes no call at all.

// collectFactor times LeaseDuration is how long a host's beat must stand
// still in an observer's view before the observer removes its roster
// entry and its positions (a host that left: at once), when no shard item
// names it: stateless hosts with fresh IDs would otherwise pile up.
const collectFactor = 3

// balance is one round of observation and balance.
func (m *member) balance() {
	m.ballMu.Lock()
	defer m.ballMu.Unlock()
	defer m.roundDone()
	m.mu.Lock()
	m.checkFence()
	stop := m.left || m.fenced || m.over != nil
	read := m.needRead || m.shards == nil || m.c.now().Sub(m.lastRead) >= m.c.cfg.ResyncInterval || len(m.toGet) > maxHintedGets
	hinted := len(m.toGet) > 0
	m.mu.Unlock()
	if stop {
		return
	}
	switch {
	case read:
		if !m.read() {
			return
		}
	case hinted:
		if !m.readHinted() {
			return
		}
	}
	m.foldCommitted()
	m.decide()
}

// foldCommitted writes, on the host that committed the initialisation, the
// committed batch's pending progress into each shard's own progress, so
// that the items no longer need the init item's commit to be read (an init
// item deleted by hand would otherwise take every state only the batch
// held with it). Each item is one conditional write, once; one that fails
// is tried again next round. Any other host does it too for the items it
// still sees unfolded a LeaseDuration after it first saw them: the
// committer may have stopped before its first round (found by the
// simulation, seed 60080300: a COMPLETED parent's state, left in the
// batch alone, went with the init item, and the parent was read again
// after its child).
func (m *member) foldCommitted() {
	m.mu.Lock()
	token, mine := m.committed, m.fold != "" && m.fold == m.committed
	var pending []*shardItem
	if token != "" {
		for _, s := range m.shards {
			if _, ok := s.pend[token]; ok {
				pending = append(pending, s)
			}
		}
	}
	if !mine {
		// Another host's commit: its committer folds it, unless it
		// is gone.
		now := m.c.now()
		switch {
		case len(pending) == 0:
			m.unfoldedSince = time.Time{}
		case m.unfoldedSince.IsZero():
			m.unfoldedSince = now
			pending = nil
		case now.Sub(m.unfoldedSince) < m.c.cfg.LeaseDuration:
			pending = nil
		}
	}
	m.mu.Unlock()
	left := false
	for _, was := range pending {
		ctx, cancel := m.callCtx()
		err := m.update(ctx, was.id, was, func(s *shardItem) *shardItem {
			if _, ok := s.pend[token]; !ok {
				return nil
			}
			return s.with(s.visible(token), token)
		})
		cancel()
		if err != nil {
			left = true
			if errors.Is(err, ErrBadItem) {
				m.fail("writing the committed progress", err)
				return
			}
		}
	}
	if mine && !left {
		m.mu.Lock()
		if m.fold == token {
			m.fold = ""
		}
		m.mu.Unlock()
	}
}

// snapshot is one read of a generation's partition.
type snapshot struct {
	shards map[string]*shardItem
	init   initItem
	ident  identityItem // in generation 0's partition only
	hasID  bool
	roster roster
	// old are the heartbeat counters of hosts of an older version.
	old map[string]uint64
}

// query reads the partition part of table, retrying nothing.
func query(ctx context.Context, table Table, part string) (*snapshot, error) {
	items, err := table.Query(ctx, part)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{shards: map[string]*shardItem{}, old: map[string]uint64{}}
	for _, it := range items {
		switch {
		case strings.HasPrefix(it.Key, prefixShard):
			s, err := decodeShard(it)
			if err != nil {
				return nil, err
			}
			snap.shards[s.id] = s
		case it.Key == keyInit:
			if snap.init, err = decodeInit(it); err != nil {
				return nil, err
			}
		case it.Key == keyIdentity:
			if snap.ident, err = decodeIdentity(it); err != nil {
				return nil, err
			}
			snap.hasID = true
		case it.Key == keyRoster:
			if snap.roster, err = decodeRoster(it); err != nil {
				return nil, err
			}
		case strings.HasPrefix(it.Key, prefixHost):
			n, _ := parseUint(it, "counter")
			snap.old[strings.TrimPrefix(it.Key, prefixHost)] = n
		}
	}
	return snap, nil
}

// read reads the partition and the generation in force into the member's
// view; it reports whether the round may go on.
func (m *member) read() bool {
	m.mu.Lock()
	m.needRead = false
	m.mu.Unlock()
	began := m.c.now()
	ctx, cancel := m.callCtx()
	m.mu.Lock()
	seq := m.beginRead()
	m.mu.Unlock()
	snap, err := query(ctx, m.c.table, m.part)
	cancel()
	if err != nil {
		m.mu.Lock()
		m.endRead(seq, nil)
		m.needRead = true
		m.mu.Unlock()
		if fatal(err) {
			m.fail("reading the table", err)
			return false
		}
		// Transient; the next round tries again. Whether the fleet
		// started over is still read: an old generation's leases are
		// fenced by nothing else.
		m.readGen(began, nil)
		return false
	}
	ok := m.readGen(began, snap)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endRead(seq, snap.shards)
	if !ok || m.left {
		return false
	}
	m.lastRead = m.c.now()
	m.toGet = nil
	if snap.init.committed != "" {
		m.committed = snap.init.committed
	}
	m.observe(snap.roster)
	m.observeOld(snap.old)
	m.absorb(nil)
	return true
}

// maxHintedGets is the most shard items a round reads one by one, as
// hints name them; more are read in one Query of the partition.
const maxHintedGets = 64

// readHinted reads the shard items that other hosts' hints name into the
// member's view; it reports whether the round may go on. A read that fails
// leaves the whole partition to read next round.
func (m *member) readHinted() bool {
	m.mu.Lock()
	ids := slices.Sorted(maps.Keys(m.toGet))
	m.toGet = nil
	m.mu.Unlock()
	got := make(map[string]*shardItem, len(ids))
	for _, id := range ids {
		ctx, cancel := m.callCtx()
		it, err := m.c.table.Get(ctx, m.part, prefixShard+id)
		cancel()
		var s *shardItem
		if err == nil {
			s, err = decodeShard(it)
		}
		if err != nil {
			if fatal(err) {
				m.fail("reading the table", err)
				return false
			}
			m.mu.Lock()
			m.needRead = true
			m.mu.Unlock()
			return false
		}
		s.id = id
		got[id] = s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left || m.shards == nil {
		return false
	}
	for id, s := range got {
		m.noteItem(id, s)
	}
	m.absorb(func(id string) bool { _, ok := got[id]; return ok })
	return true
}

// absorb acts on the member's view as a read left it: the Loader is woken
// when a state changed, and our takes in doubt, orphans and leases are
// settled by the items read (fresh says which; nil: all). m.mu must be
// held.
func (m *member) absorb(fresh func(id string) bool) {
	if fresh == nil {
		fresh = func(string) bool { return true }
	}
	shards := m.shards
	if d := digest(shards, m.committed); d != m.digest {
		m.digest = d
		m.signal()
	}
	for id, epoch := range m.unsure {
		if !fresh(id) {
			continue
		}
		if s, ok := shards[id]; !ok || s.owner != m.me || s.epoch != epoch {
			delete(m.unsure, id) // it did not land, or moved on since
		}
	}
	for id, e := range m.orphans {
		if !fresh(id) {
			continue
		}
		if s, ok := shards[id]; !ok || s.epoch != e.epoch || s.owner != m.me {
			delete(m.orphans, id) // taken since (it read it, or moved on)
			m.dirty = true
		}
	}
	// Our leases: lost if the table names another owner or epoch; asked
	// for if another host wants them.
	for id, l := range m.held {
		if !fresh(id) {
			continue
		}
		s, ok := shards[id]
		switch {
		case !ok || s.owner != m.me || s.epoch != l.epoch:
			owner, epoch := "", uint64(0)
			if ok {
				owner, epoch = s.owner, s.epoch
			}
			m.lose(l, kinesisload.LostExpired, fmt.Sprintf("owner is %q at epoch %d", owner, epoch))
		case s.handoff != "" && s.handoff != m.me:
			l.askHandoff()
		}
	}
}

// observeOld warns about hosts of an older version of this library that
// share the table: their heartbeat items move. They do not know the
// roster, so they take every shard of the new hosts for free, and the new
// hosts theirs: nothing is lost (every write is fenced, positions never
// move back), but shards move back and forth, delivering again, until the
// last of them stops. m.mu must be held.
func (m *member) observeOld(old map[string]uint64) {
	for id, n := range old {
		if prev, ok := m.oldHosts[id]; ok && prev != n {
			m.c.cfg.Logger.Error("fleet: a host of an older tidemark version heartbeats in this table: stop every older host before starting this version (see the fleet guide, 'Upgrading'); until then shards move back and forth between the versions and records are delivered again",
				"stream", m.stream, "host", id)
		}
		m.oldHosts[id] = n
	}
}

// digest summarises what the Loader should see change: the shards, their
// states, and the initialisation commit.
func digest(shards map[string]*shardItem, committed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(committed))
	for _, id := range slices.Sorted(maps.Keys(shards)) {
		fmt.Fprintf(h, "|%s=%d", id, shards[id].visible(committed).State)
	}
	return h.Sum64()
}

// leasable reports whether a shard may be read: not COMPLETED, every
// parent in the table COMPLETED. A shard at SHARD_END that is not
// COMPLETED is leasable: its owner commits COMPLETED without a read, and
// its children wait for that commit (a host's positions carry the end of
// a shard whose COMPLETED commit did not land before the host fenced
// itself, and the next owner's take stores it).
func leasable(shards map[string]*shardItem, committed string, id string) bool {
	s := shards[id]
	p := s.visible(committed)
	return !pendingOnly(p) && p.State != kinesisload.StateCompleted && !parentOpen(shards, committed, p)
}

// pendingOnly reports whether p, an item's progress as the committed batch
// shows it, is empty: the item holds only the pending progress of an
// initialisation that has not committed (or of another than the one in
// force). Load skips it, and no host takes it: nothing in it says where to
// resume (found by the simulation, seed 8047263).
func pendingOnly(p kinesisload.ShardProgress) bool {
	return p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0
}

// parentOpen reports whether a parent of p has an item in shards that is
// not COMPLETED (a parent without an item counts as done: pruned, or
// never tracked).
func parentOpen(shards map[string]*shardItem, committed string, p kinesisload.ShardProgress) bool {
	for _, par := range p.Parents {
		if ps, ok := shards[par]; ok && ps.visible(committed).State != kinesisload.StateCompleted {
			return true
		}
	}
	return false
}

// free reports whether s may be taken by m: unowned, owned by a host m
// takes for dead, or owned by m in an earlier life; and not reserved by a
// handoff to another live host. m.mu must be held.
func (m *member) free(s *shardItem, now time.Time) bool {
	if s.handoff != "" && s.handoff != m.me && m.alive(s.handoff, now) {
		return false
	}
	switch s.owner {
	case "":
		return true
	case m.me:
		return true // a lease of ours we no longer hold
	default:
		return !m.mayHold(s.owner, now)
	}
}

// decide takes free shards up to the fair share, asks for one from the
// most loaded host when nothing was free, and collects the entries of
// hosts long gone; from the member's view of the table.
func (m *member) decide() {
	now := m.c.now()
	m.mu.Lock()
	if m.left || m.fenced || m.shards == nil {
		m.mu.Unlock()
		return
	}
	shards, committed := m.shards, m.committed
	live := 1
	for id := range m.seen {
		if m.alive(id, now) {
			live++
		}
	}
	load := map[string]int{}
	var candidates []string
	total := 0
	for id, s := range shards {
		if !leasable(shards, committed, id) {
			continue
		}
		total++
		if s.owner != "" && s.owner != m.me && m.alive(s.owner, now) {
			load[s.owner]++
		}
		switch {
		case m.held[id] != nil || !m.free(s, now):
		case m.offer[id]:
			candidates = append(candidates, id)
		case !m.hinted[id]:
			// Free, but not offered: the Loader's offer predates
			// (a shard this host released since, or whose owner
			// died). Wake it once to offer its ready shards again.
			m.hinted[id] = true
			m.signal()
		}
	}
	// A shard our item names us owner of, whose lease we do not hold (we
	// fenced ourselves, and run again; or a take of ours landed unknown
	// to us, its answer and read-back lost, or while we were fenced),
	// that a live host asked for: we never answer that handoff as a lease
	// would, and no host takes it from us alive. Give it up to the asker
	// (found by the simulation, seed 90004365).
	var giveUp []*shardItem
	for id, s := range shards {
		if s.owner == m.me && m.held[id] == nil && s.handoff != "" && s.handoff != m.me && m.alive(s.handoff, now) {
			giveUp = append(giveUp, s)
		}
	}
	target := int(math.Ceil(float64(total) / float64(live)))
	mine := 0 // a COMPLETED shard not released yet does not count
	for id := range m.held {
		if s := shards[id]; s != nil && leasable(shards, committed, id) {
			mine++
		}
	}
	m.mu.Unlock()

	m.collect(shards, now)
	for _, s := range giveUp {
		m.giveUp(s)
	}

	// Reserved for us or ours already first, then expired and unowned,
	// in random order so that hosts taking at once rarely collide. Ours
	// already (we fenced ourselves, and run again) are taken back whatever
	// our share: every other host's view counts them ours, and no host
	// takes a live host's shard. Balancing by throughput, the hosts weigh
	// us by the load we publish, which counts only the leases we hold, so
	// none would ask for them (found by the simulation, seed 245011133).
	mrand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	ours := func(id string) bool { return shards[id].handoff == m.me || shards[id].owner == m.me }
	slices.SortStableFunc(candidates, func(a, b string) int {
		ra, rb := ours(a), ours(b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
	took := false
	var wrote []string
	chunks := map[string]map[string]posEntry{} // positions of dead owners, read once a round
	for _, id := range candidates {
		if mine >= target && !ours(id) {
			break
		}
		granted, landed := m.take(shards[id], committed, chunks)
		if granted {
			mine++
			took = true
		}
		if landed {
			wrote = append(wrote, id)
		}
	}
	if len(wrote) > 0 {
		// One write of our roster entry tells every take of the round.
		m.changed(wrote...)
	}
	if m.steal != "" {
		m.mu.Lock()
		l := m.held[m.steal]
		m.mu.Unlock()
		if l != nil || now.Sub(m.stealAt) >= m.c.cfg.LeaseDuration {
			if l == nil {
				m.withdraw(m.steal)
			}
			m.steal = ""
		}
	}
	// One steal at a time, only when nothing was free: from the most
	// loaded host, when it holds at least two more than we do.
	switch {
	case took || m.steal != "":
	case m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput:
		m.stealByThroughput(shards, committed, now)
	default:
		victim, most := "", 0
		for _, id := range slices.Sorted(maps.Keys(load)) {
			if load[id] > most {
				victim, most = id, load[id]
			}
		}
		if victim != "" && most >= mine+2 {
			m.mu.Lock()
			var theirs []string
			for id, s := range shards {
				if s.owner == victim && s.handoff == "" && m.offer[id] && leasable(shards, committed, id) {
					theirs = append(theirs, id)
				}
			}
			m.mu.Unlock()
			if len(theirs) > 0 {
				id := theirs[mrand.IntN(len(theirs))]
				if m.request(shards[id]) {
					m.steal, m.stealAt = id, now
				}
			}
		}
	}
	m.mu.Lock()
	if len(m.granted) > 0 {
		m.signal()
	}
	m.mu.Unlock()
}

// stealByThroughput asks for the shard [kinesisload.PickStealWithin]
// picks from the live hosts by decreasing load (as their beats publish
// it), by the rates of their shards in their positions: from the most
// loaded host from which a steal narrows the spread (the most loaded may
// hold one hot shard that no steal can move, while the next holds many).
// It reads one host's positions a round: the next round tries the next
// host, and a steal starts again from the most loaded.
func (m *member) stealByThroughput(shards map[string]*shardItem, committed string, now time.Time) {
	m.mu.Lock()
	mine, heaviest := 0.0, kinesisload.RateFloor
	for id, l := range m.held {
		if leasable(shards, committed, id) {
			w := kinesisload.Weight(l.meter.Rate())
			mine, heaviest = mine+w, max(heaviest, w)
		}
	}
	type host struct {
		id   string
		load float64
	}
	// A host that balances by count (a fleet changing its BalanceBy)
	// publishes no load: it counts its shards at the floor, as its
	// positions' rates (none) say.
	counted := map[string]float64{}
	for id, s := range shards {
		if s.owner != "" && s.owner != m.me && leasable(shards, committed, id) {
			counted[s.owner] += kinesisload.RateFloor
		}
	}
	var victims []host
	for id, s := range m.seen {
		load := s.load
		if s.by != kinesisload.BalanceByThroughput {
			load = counted[id]
		}
		// A steal moves at least RateFloor, and must leave the spread
		// narrower by RateFloor.
		if m.alive(id, now) && load >= mine+2*kinesisload.RateFloor {
			victims = append(victims, host{id, load})
		}
	}
	slices.SortFunc(victims, func(a, b host) int {
		if a.load != b.load {
			if a.load > b.load {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	theirs := map[string][]string{}
	for id, s := range shards {
		if s.owner != "" && s.owner != m.me && s.handoff == "" && m.offer[id] && leasable(shards, committed, id) {
			theirs[s.owner] = append(theirs[s.owner], id)
		}
	}
	m.mu.Unlock()
	var asked []host
	for _, v := range victims {
		if len(theirs[v.id]) > 0 {
			asked = append(asked, v)
		}
	}
	if len(asked) == 0 {
		m.stealNext = 0
		return
	}
	v := asked[m.stealNext%len(asked)]
	id := m.pickFrom(v.id, theirs[v.id], mine, heaviest, shards, committed)
	if id == "" {
		m.stealNext++
		return
	}
	m.stealNext = 0
	if m.request(shards[id]) {
		m.steal, m.stealAt = id, now
	}
}

// pickFrom returns the shard of victim's (theirs: those we may ask for)
// that [kinesisload.PickStealWithin] picks, by the rates victim published
// in its positions; "" when none, or when its positions say nothing yet
// of one of its shards. The margin grows with the heaviest shard of
// either host (heaviest: ours): a busy shard's rate wobbles, and with the
// floor alone the idle shards beside two busy ones were handed to and fro
// for ever (found by a review).
func (m *member) pickFrom(victim string, theirs []string, mine, heaviest float64, shards map[string]*shardItem, committed string) string {
	ctx, cancel := m.callCtx()
	entries, err := m.positionsOf(ctx, victim)
	cancel()
	if err != nil {
		return ""
	}
	// The victim's shards' rates, as it published them under their
	// current epochs: a shard it took since its last write is not known
	// yet, and a steal on a partial picture would move shards back and
	// forth. Its load is their sum.
	rates := make(map[string]float64, len(theirs))
	theirLoad := 0.0
	for id, s := range shards {
		if s.owner != victim || !leasable(shards, committed, id) {
			continue
		}
		e, ok := entries[id]
		if !ok || e.epoch != s.epoch {
			return ""
		}
		w := kinesisload.Weight(e.rate)
		theirLoad, heaviest = theirLoad+w, max(heaviest, w)
		if slices.Contains(theirs, id) {
			rates[id] = w
		}
	}
	return kinesisload.PickStealWithin(mine, theirLoad, rates, max(kinesisload.RateFloor, heaviest/stealMarginShare))
}

// stealMarginShare: a steal must narrow the spread by the heaviest
// shard's weight over this, at least (and at least RateFloor). A
// minute's average of a busy shard's rate wobbles by about a hundredth of
// it; a sixteenth is several times that.
const stealMarginShare = 16

// positionsOf reads host's positions in this generation.
func (m *member) positionsOf(ctx context.Context, host string) (map[string]posEntry, error) {
	items, err := m.c.table.Query(ctx, posPartition(m.part, host))
	if err != nil {
		return nil, err
	}
	return m.positionsDecoded(host, items), nil
}

// take acquires the shard as the member's view has it: owner us, the
// epoch one above the item's or the floor of now if higher, on condition
// that the item is unchanged. Taking a shard from a host taken for dead,
// it first reads that host's positions (chunks caches them for the
// round): the position it committed under that epoch is
// further than the item's, which has only its last release or state
// change. A write whose outcome is unknown is read back. It reports
// whether a lease was granted, and whether the take landed in the table:
// the caller then records the change (once for all the round's takes).
func (m *member) take(was *shardItem, committed string, chunks map[string]map[string]posEntry) (granted, landed bool) {
	p := was.visible(committed)
	if was.owner != "" {
		entries, ok := chunks[was.owner]
		if !ok {
			ctx, cancel := m.callCtx()
			var err error
			entries, err = m.positionsOf(ctx, was.owner)
			cancel()
			if err != nil {
				if fatal(err) {
					m.fail("reading a host's positions", err)
				}
				return false, false // its position is not known: not now
			}
			chunks[was.owner] = entries
		}
		if e, ok := entries[was.id]; ok && e.epoch == was.epoch {
			p = kinesisload.MergeProgress(p, kinesisload.ShardProgress{ShardID: was.id, Position: e.pos})
		}
	}
	if p.State < kinesisload.StateActive {
		p.State = kinesisload.StateActive // every parent is COMPLETED
	}
	next := was.with(p, committed)
	// Above the item's epoch, and at least the floor of now: an item whose
	// epoch went back (restored from a backup, lowered by hand) must not
	// grant leases below one granted before, which a TransactionalSink
	// would refuse as fenced, one take a round, until the epoch climbed
	// back.
	next.owner, next.epoch, next.handoff, next.rate = m.me, max(was.epoch+1, epochFloor(m.gen, m.c.now())), "", 0
	ctx, cancel := m.callCtx()
	defer cancel()
	stored, err := m.c.table.Put(ctx, next.encode(m.part))
	if err != nil && !fatal(err) {
		// A refused condition may be the answer to a retry of a write
		// that landed: read back either way.
		got, gerr := m.c.table.Get(ctx, m.part, prefixShard+was.id)
		if gerr != nil {
			m.mu.Lock()
			m.unsure[was.id] = next.epoch // it may have landed
			m.needRead = true
			m.mu.Unlock()
			return false, false
		}
		s, derr := decodeShard(got)
		if derr != nil {
			m.fail("reading a shard item", derr)
			return false, false
		}
		if !s.exists() || s.owner != m.me || s.epoch != next.epoch {
			m.mu.Lock()
			if s.exists() {
				m.setShard(was.id, s)
			}
			m.needRead = true
			m.mu.Unlock()
			return false, false
		}
		stored, err = got, nil
	}
	if err != nil {
		m.fail("taking a shard", err)
		return false, false
	}
	now, derr := decodeShard(stored)
	if derr != nil {
		m.fail("reading a shard item", derr)
		return false, false
	}
	m.mu.Lock()
	m.setShard(was.id, now)
	if m.left || m.fenced {
		// Ours in the table, but no lease: Leave gives it up (a fenced
		// host's expires, or it takes it again).
		m.unsure[was.id] = now.epoch
		m.mu.Unlock()
		return false, true
	}
	delete(m.unsure, was.id)
	l := newLease(m, was.id, now.epoch, now.visible(committed), m.acquireReason(was))
	l.rewind = now.rewind
	if r := was.rate; r > 0 {
		l.meter.Seed(r)
	} else if e, ok := chunks[was.owner][was.id]; ok && e.rate > 0 {
		l.meter.Seed(e.rate)
	}
	m.held[was.id] = l
	m.granted = append(m.granted, l)
	m.dirty = true // its position, under our epoch, with the next beat
	m.mu.Unlock()
	return true, true
}

// acquireReason says why a shard whose item was as in was is taken by m.
func (m *member) acquireReason(was *shardItem) kinesisload.AcquireReason {
	switch {
	case was.owner == m.me:
		return kinesisload.AcquireReclaimed
	case was.owner != "":
		return kinesisload.AcquireExpired
	case was.handoff == m.me:
		return kinesisload.AcquireHandoff // its owner released it to us
	case !was.everOwned(m.gen):
		return kinesisload.AcquireInitial
	default:
		return kinesisload.AcquireUnowned
	}
}

// request asks the owner of the shard to hand it over.
func (m *member) request(was *shardItem) bool {
	next := *was
	next.handoff = m.me
	ctx, cancel := m.callCtx()
	stored, err := m.c.table.Put(ctx, next.encode(m.part))
	cancel()
	switch {
	case err == nil:
		if s, derr := decodeShard(stored); derr == nil {
			m.mu.Lock()
			m.setShard(was.id, s)
			m.mu.Unlock()
		}
		m.changed(was.id)
		return true
	case errors.Is(err, ErrUnknown):
		m.mu.Lock()
		m.needRead = true
		m.mu.Unlock()
		m.changed(was.id)
		return true
	case fatal(err):
		m.fail("asking for a shard", err)
	default:
		m.mu.Lock()
		m.needRead = true
		m.mu.Unlock()
	}
	return false
}

// withdraw removes our handoff request on the shard.
func (m *member) withdraw(id string) {
	ctx, cancel := m.callCtx()
	defer cancel()
	err := m.update(ctx, id, nil, func(s *shardItem) *shardItem {
		if !s.exists() || s.handoff != m.me {
			return nil
		}
		next := *s
		next.handoff = ""
		return &next
	})
	if err == nil {
		m.changed(id)
	}
}

// update makes a read-modify-write of a shard's item land: mutate returns
// the item as it should be, or nil when nothing is to change. was is the
// item as last read (nil: the member's view, or a read). A condition
// failure or an unknown outcome reads the item again and retries, up to a
// few times.
func (m *member) update(ctx context.Context, id string, was *shardItem, mutate func(*shardItem) *shardItem) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if attempt >= 8 {
			return fmt.Errorf("fleet: stream %s: shard %s: %w after %d attempts", m.stream, id, errGaveUp, attempt)
		}
		if was == nil {
			m.mu.Lock()
			if m.shards != nil && attempt == 0 {
				was = m.shards[id]
			}
			m.mu.Unlock()
		}
		if was == nil {
			got, err := m.c.table.Get(ctx, m.part, prefixShard+id)
			if fatal(err) {
				return err
			}
			if err != nil {
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return err
				}
				continue
			}
			if was, err = decodeShard(got); err != nil {
				return err
			}
			was.id = id
			// As it is now: a write of ours whose answer said
			// otherwise may be in it (Load reads the view).
			m.mu.Lock()
			m.noteItem(id, was)
			m.mu.Unlock()
		}
		next := mutate(was)
		if next == nil {
			return nil
		}
		next.id = id
		stored, err := m.c.table.Put(ctx, next.encode(m.part))
		switch {
		case err == nil:
			if s, derr := decodeShard(stored); derr == nil {
				m.mu.Lock()
				if m.shards != nil {
					m.setShard(id, s)
				}
				m.mu.Unlock()
			}
			return nil
		case fatal(err):
			return err
		case errors.Is(err, ErrUnknown):
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		was = nil
	}
}

// collect removes the roster entries and the positions of hosts that left
// or died long ago and own nothing (no shard item names them, and they
// hold no initialisation lock). At most a few per round. The heartbeat
// items of hosts of an older version ("host#<id>") are left as they are:
// they are only read, for observeOld's warning.
func (m *member) collect(shards map[string]*shardItem, now time.Time) {
	owns := map[string]bool{}
	for _, s := range shards {
		owns[s.owner] = true
	}
	var gone []string
	m.mu.Lock()
	for id, s := range m.seen {
		if owns[id] {
			continue
		}
		if s.counter == unknownCounter {
			// Noticed as an owner without an entry: forgotten once no
			// item names it, so that its time does not outlive it (a
			// host of that name joining later is timed afresh).
			if now.Sub(s.at) >= collectFactor*m.c.cfg.LeaseDuration {
				delete(m.seen, id)
			}
			continue
		}
		if s.left || now.Sub(s.at) >= collectFactor*m.c.cfg.LeaseDuration {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	// A few a round, picked at random: a host whose positions cannot be
	// deleted (a chunk edited by hand) must not hold up the others.
	mrand.Shuffle(len(gone), func(i, j int) { gone[i], gone[j] = gone[j], gone[i] })
	for _, id := range gone[:min(len(gone), 4)] {
		m.mu.Lock()
		s := m.seen[id]
		m.mu.Unlock()
		ctx, cancel := m.callCtx()
		items, err := m.c.table.Query(ctx, posPartition(m.part, id))
		for _, it := range items {
			if err != nil {
				break
			}
			err = m.c.table.Delete(ctx, it.Partition, it.Key, it.Version)
		}
		if err == nil {
			// The entry last, once its positions are gone: without the
			// entry nothing names its positions' partition again.
			_, err = m.c.table.SetEntry(ctx, m.part, keyRoster, fieldBeats, id, s.raw, "")
		}
		cancel()
		if fatal(err) {
			m.fail("collecting the entry of host "+id, err)
			return
		}
		if err == nil {
			m.mu.Lock()
			delete(m.seen, id)
			m.mu.Unlock()
		}
	}
}

// giveUp releases was, a shard our item names us owner of whose lease we
// do not hold, for the host that asked for it (the request stays as its
// reservation), with the position we reached under its epoch (our
// positions hold it as an orphan) folded in, as a lease's release would.
func (m *member) giveUp(was *shardItem) {
	m.mu.Lock()
	e, orphan := m.orphans[was.id]
	committed := m.committed
	m.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	err := m.update(ctx, was.id, was, func(s *shardItem) *shardItem {
		if !s.exists() || s.owner != m.me || s.epoch != was.epoch {
			return nil
		}
		p := s.visible(committed)
		rate := 0.0
		if orphan && e.epoch == s.epoch {
			p = kinesisload.MergeProgress(p, kinesisload.ShardProgress{ShardID: s.id, Position: e.pos})
			rate = e.rate
		}
		n := s.with(p, committed)
		n.owner = ""
		if m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput && rate > 0 {
			n.rate = rate // as a lease's release writes it: the asker seeds its meter
		}
		return n
	})
	if err != nil {
		// Tried again next round while the request stands; an item that
		// cannot be decoded stops the session.
		if errors.Is(err, ErrBadItem) {
			m.fail("giving up a shard asked for", err)
		}
		return
	}
	m.changed(was.id)
}

// backoff returns the pause before retry attempt (0-based): 20 ms
// doubling to 1 s, with full jitter.
func backoff(attempt int) time.Duration {
	d := 20 * time.Millisecond << min(attempt, 6)
	d = min(d, time.Second)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}
