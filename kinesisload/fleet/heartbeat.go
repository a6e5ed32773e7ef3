package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// This file is a host's heartbeat: its entry in its generation's roster
// item (one conditional write per round, which answers with every host's
// entry), the count of its changes that tells the others to read the
// table again, and its positions (one write per round for all its shards).

// chunkEntries is the most positions one chunk item holds (about 100 KB,
// far below DynamoDB's 400 KB item limit): a host holding more shards
// writes several chunks.
const chunkEntries = 1000

// register writes the roster entry at Join: a beat afresh or after the
// entry an earlier life of this host left, with left cleared.
func (m *member) register(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		it, err := m.c.table.Get(ctx, m.part, keyRoster)
		if err == nil {
			var r roster
			if r, err = decodeRoster(it); err != nil {
				return fmt.Errorf("fleet: host %s joining stream %s: %w", m.me, m.stream, err)
			}
			if r.next > m.gen {
				// The roster says the fleet left this generation:
				// the identity item lags (a start-over half done).
				return fmt.Errorf("%w: stream %s: generation %d was started over (its roster names generation %d) but the identity item read before named it", errGenMoved, m.stream, m.gen, r.next)
			}
			m.mu.Lock()
			m.knowEntry(r)
			if b, ok := r.beats[m.me]; ok {
				m.changes = b.changes
			}
			m.mu.Unlock()
			m.beat()
			m.mu.Lock()
			landed := !m.lastOK.IsZero()
			over := m.over
			m.mu.Unlock()
			if over != nil {
				return over
			}
			if landed {
				return nil
			}
		} else if fatal(err) {
			return fmt.Errorf("fleet: host %s joining stream %s: reading the roster: %w", m.me, m.stream, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return fmt.Errorf("fleet: host %s joining stream %s: %w", m.me, m.stream, err)
		}
	}
}

// beat writes our roster entry with the next counter, on condition that
// the entry is the one we last wrote (a write whose answer was lost is
// read back), observes every other host's entry in the answer, fences
// the host when no beat landed for too long, starts a balance round, and
// writes the positions when they are due.
func (m *member) beat() {
	m.beatMu.Lock()
	defer m.beatMu.Unlock()
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return
	}
	began := m.c.now()
	if m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		// The rates, published with the load in the beat and with the
		// positions (written at least once a lease duration).
		for _, l := range m.held {
			l.meter.Tick(began)
		}
		if began.Sub(m.flushedAt) >= m.c.cfg.LeaseDuration {
			m.dirty = true
		}
	}
	next := m.nextEntry()
	chunked := m.mayBeatInChunk(next, began)
	next.counter = max(m.entry.counter, m.maxTried(), m.chunkBeat) + 1
	if chunked {
		m.chunkBeat = next.counter
		m.mu.Unlock()
		m.beatInChunk(next, began)
	} else {
		m.tried[next.counter] = began
		m.mu.Unlock()
		m.writeEntry(next, began)
	}
	m.mu.Lock()
	m.checkFence()
	m.mu.Unlock()
	m.watch()
	m.kickBalance() // with what this round saw, beside the positions' write
	if !chunked {
		m.flush(false)
	}
	m.keepLock()
}

// mayBeatInChunk reports whether this round's beat may be carried by our
// first positions chunk, which the round writes anyway: the positions
// are due, our entry has nothing new to say (its counter aside), it says
// we may (and a write of this session landed it), and every other host's
// entry says the same (a host of an earlier version, or one that has not
// written its entry yet, reads only the roster). A busy host so writes
// once a round, not twice. m.mu must be held.
func (m *member) mayBeatInChunk(next beat, now time.Time) bool {
	cfg := m.c.cfg
	if m.fenced || m.fenceDue(now) || !m.wroteEntry || !m.entryKnown || !m.entry.chunked || !m.dirty || len(m.oldHosts) > 0 ||
		now.Sub(m.flushedAt) < cfg.CheckpointInterval-cfg.RenewInterval/2 {
		return false
	}
	if cfg.BalanceBy == kinesisload.BalanceByThroughput {
		if now.Sub(m.loadAt) >= cfg.LeaseDuration {
			return false // our load is published at least once a lease duration
		}
		next.load = m.entry.load
	}
	if next.String() != m.entryRaw {
		return false
	}
	for id, s := range m.seen {
		if id == m.me || s.left || s.chunked {
			continue
		}
		// A host of an earlier version counts as here until its entry
		// leaves the roster (left, or collected): its counter standing
		// still does not mean it stopped reading the roster (its writes
		// may fail as its reads go on), and it would take our shards
		// once a write of its lands, our counter still in its reads.
		if s.known() || !m.still(s, now) {
			return false
		}
	}
	return true
}

// beatInChunk is a beat carried by our first positions chunk: the round
// writes our positions with the counter of next, then reads the roster,
// for the others' entries. The beat counts as landed (for our fence)
// only when both did and the roster holds our entry as we last wrote it
// (one marked left or removed by hand is written again next round).
// When the chunk or the read fails, the round writes our entry too, as
// a round that beats in the roster does (its answer is the roster).
// The calls end by the time we fence. Called with m.beatMu held.
func (m *member) beatInChunk(next beat, began time.Time) {
	cfg := m.c.cfg
	// As writeEntry's call, ours must not outlive the moment we fence:
	// a beat that landed later, counted from its start, would let this
	// host keep leases another host took after its fence.
	parent, cancelAll := m.ctx, func() {}
	if !cfg.ManualRounds {
		m.mu.Lock()
		fenceAt := m.lastOK.Add(cfg.LeaseDuration - cfg.FenceMargin)
		m.mu.Unlock()
		parent, cancelAll = context.WithTimeout(m.ctx, max(fenceAt.Sub(began), 0))
	}
	defer cancelAll()
	settled := false
	if m.flushUnder(parent, true) {
		ctx, cancel := context.WithTimeout(parent, cfg.CallTimeout)
		it, err := m.c.table.Get(ctx, m.part, keyRoster)
		cancel()
		if fatal(err) {
			m.fail("reading the roster", err)
			return
		}
		if err == nil {
			r, derr := decodeRoster(it)
			if derr != nil {
				m.fail("reading the roster", derr)
				return
			}
			m.mu.Lock()
			m.checkFence() // as writeEntry's
			if m.entryKnown && r.raw[m.me] == m.entryRaw && began.After(m.lastOK) {
				m.lastOK = began
			}
			m.settle(r, began)
			m.mu.Unlock()
			settled = true
		}
	}
	if !settled {
		m.mu.Lock()
		m.tried[next.counter] = began
		m.mu.Unlock()
		m.writeEntry(next, began)
	}
}

// nextEntry is our entry as the next write makes it: the counter as it
// is, the changes made so far, what we balance by and our load. m.mu must
// be held.
func (m *member) nextEntry() beat {
	if m.hint.from != 0 && m.c.now().Sub(m.hintAt) >= hintKeep*m.c.cfg.RenewInterval {
		m.hint = hint{} // every host has read it by now, or reads all
	}
	next := beat{counter: m.entry.counter, changes: m.changes, by: m.c.cfg.BalanceBy, hint: m.hint, chunked: true}
	if m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		for _, l := range m.held {
			next.load += kinesisload.Weight(l.meter.Rate())
		}
	}
	return next
}

func (m *member) maxTried() uint64 {
	var n uint64
	for c := range m.tried {
		n = max(n, c)
	}
	return n
}

// writeEntry writes next as our roster entry, conditional on the entry we
// know, and settles what we know from the answer or a read back: a beat
// whose counter we tried landed when it began (not when this write
// began: an earlier write whose answer was lost may be the one that
// landed). Called with m.beatMu held.
func (m *member) writeEntry(next beat, began time.Time) {
	cfg := m.c.cfg
	m.mu.Lock()
	old := ""
	if m.entryKnown {
		old = m.entryRaw
	}
	fenceAt := m.lastOK.Add(cfg.LeaseDuration - cfg.FenceMargin)
	m.mu.Unlock()
	timeout := cfg.CallTimeout
	if !cfg.ManualRounds {
		// The call must not outlive the moment we fence: after it, the
		// fence is checked.
		if d := fenceAt.Sub(began); d > 0 && d < timeout {
			timeout = d
		}
	}
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	it, err := m.c.table.SetEntry(ctx, m.part, keyRoster, fieldBeats, m.me, old, next.String())
	if fatal(err) {
		m.fail("writing the heartbeat", err)
		return
	}
	if err != nil {
		// Refused or unknown: read back what our entry is.
		if it, err = m.c.table.Get(ctx, m.part, keyRoster); err != nil {
			if fatal(err) {
				m.fail("reading the roster", err)
			}
			return
		}
	}
	r, derr := decodeRoster(it)
	if derr != nil {
		m.fail("reading the roster", derr)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A fence that passed before this answer came is kept: the beat
	// counts from its start, and must not make valid again the leases
	// held across the fence (another host may have taken them).
	m.checkFence()
	if got, ok := r.beats[m.me]; ok {
		if at, tried := m.tried[got.counter]; tried && !got.left {
			// The beat of that counter landed (counters are never
			// tried twice), when it began: this write's, or an
			// earlier one whose answer was lost.
			if at.After(m.lastOK) {
				m.lastOK = at
			}
			// Our positions carry it too (see flush): a counter
			// no write of ours landed never moves them.
			m.chunkBeat = max(m.chunkBeat, got.counter)
			if at.After(m.loadAt) {
				m.loadAt = at // the load it published, computed then
			}
			m.wroteEntry = true
			for c := range m.tried {
				if c <= got.counter {
					delete(m.tried, c)
				}
			}
		}
	}
	m.settle(r, began)
}

// settle takes in the roster r, read by a call that began at began: our
// entry as it stands, and every other host's. m.mu must be held.
func (m *member) settle(r roster, began time.Time) {
	m.knowEntry(r)
	if began.After(m.rosterAt) {
		m.rosterAt = began
	}
	if m.fenced && !m.fenceDue(m.c.now()) {
		m.fenced = false
	}
	m.observe(r)
}

// knowEntry takes in our roster entry as r has it, decoded and as stored:
// absent (removed, collected) or undecodable (edited by hand), the next
// write writes it afresh over what is stored. m.mu must be held.
func (m *member) knowEntry(r roster) {
	m.entry, m.entryRaw, m.entryKnown = r.beats[m.me], r.raw[m.me], true
}

// observe takes in every other host's beat as the roster shows it, on our
// clock: a counter that moved resets its time, changes that moved ask for
// a read of the table. m.mu must be held.
func (m *member) observe(r roster) {
	now := m.c.now()
	if r.next > m.gen {
		m.voidLocked(r.next)
		return
	}
	for id, b := range r.beats {
		if id == m.me {
			continue
		}
		s, ok := m.seen[id]
		if !ok || !s.known() || s.counter != b.counter || s.left != b.left {
			at, moved := now, now
			if ok && s.counter == b.counter && s.left == b.left {
				at, moved = s.at, s.moved
			}
			switch {
			case (!ok || !s.known()) && b.changes > 0:
				// A host that made changes before we knew its entry
				// (an earlier life's, or an operator's rewind).
				m.needRead = true
			case !ok || !s.known():
				// New, and nothing changed yet.
			case s.changes != b.changes:
				m.noteChanges(s.changes, b)
			}
			m.seen[id] = seen{counter: b.counter, changes: b.changes, left: b.left, load: b.load, by: b.by, raw: r.raw[id], at: at,
				moved: moved, chunked: b.chunked, chunk: s.chunk, chunkAt: s.chunkAt, chunkMoved: s.chunkMoved, watched: s.watched}
		} else {
			if s.changes != b.changes {
				m.noteChanges(s.changes, b)
			}
			if s.chunked && !b.chunked {
				// No longer watched in its positions, where it may
				// have beaten until now (its entry rewritten by hand):
				// timed from now, as a beat.
				s.at = now
			}
			s.changes, s.load, s.by, s.raw, s.chunked = b.changes, b.load, b.by, r.raw[id], b.chunked
			m.seen[id] = s
		}
		if b.by != m.c.cfg.BalanceBy && !b.left && !m.warned[id] {
			m.warned[id] = true
			m.c.cfg.Logger.Warn("fleet: a host balances by another rule: every host of a fleet must use the same BalanceBy",
				"stream", m.stream, "host", id, "its", b.by, "ours", m.c.cfg.BalanceBy)
		}
	}
	for id, err := range r.bad {
		if id == m.me {
			continue
		}
		// Timed from when the entry last changed: its host, alive,
		// writes over it at its next beat.
		if s, ok := m.seen[id]; !ok || s.counter != badCounter || s.raw != r.raw[id] {
			m.seen[id] = seen{counter: badCounter, raw: r.raw[id], at: now}
		}
		if m.badWarned[id] != r.raw[id] {
			m.badWarned[id] = r.raw[id]
			m.c.cfg.Logger.Warn("fleet: a host's roster entry does not decode (edited by hand?): the host counts as absent until it writes its entry again",
				"stream", m.stream, "host", id, "err", err)
		}
	}
	for id := range m.badWarned {
		if _, ok := r.bad[id]; !ok {
			delete(m.badWarned, id)
		}
	}
	for id, s := range m.seen {
		if _, ok := r.beats[id]; !ok && s.counter != unknownCounter && r.bad[id] == nil {
			delete(m.seen, id) // collected
			delete(m.warned, id)
		}
	}
}

// noteChanges takes in that a host's changes moved from seen to b's: the
// next round reads the items its hint names, or the whole partition when
// the hint does not cover every change since seen. m.mu must be held.
func (m *member) noteChanges(seen uint64, b beat) {
	if b.changes < seen || !b.hint.covers(seen) {
		m.needRead = true
		return
	}
	if m.toGet == nil {
		m.toGet = map[string]bool{}
	}
	for _, id := range b.hint.ids {
		m.toGet[id] = true
	}
}

// hintKeep times RenewInterval is how long a host keeps naming in its
// entry the items its latest changes wrote: every other host's round
// reads the roster within one RenewInterval (a host that missed the hint
// reads the whole partition).
const hintKeep = 3

// changed records a change of ours to the table (a lease taken, released
// or asked for, a state advanced, a shard added): our entry's changes
// grow at once, so that every host reads, at its next round, the shard
// items ids (none given: the whole partition).
func (m *member) changed(ids ...string) {
	m.beatMu.Lock()
	defer m.beatMu.Unlock()
	m.mu.Lock()
	m.changes++
	m.addHint(ids)
	if m.left {
		m.mu.Unlock()
		return
	}
	next := m.nextEntry()
	began := m.c.now()
	m.mu.Unlock()
	// The counter stays: this is not a heartbeat (writeEntry counts it
	// as one only if its counter is one we tried).
	m.writeEntry(next, began)
}

// addHint names ids in our entry's hint, as written by change m.changes
// (none: the whole partition). m.mu must be held.
func (m *member) addHint(ids []string) {
	if m.hint.from == 0 {
		m.hint = hint{from: m.changes}
	}
	m.hintAt = m.c.now()
	if m.hint.all {
		return
	}
	if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return !hintable(id) }) {
		m.hint = hint{from: m.hint.from, all: true}
		return
	}
	for _, id := range ids {
		if i, found := slices.BinarySearch(m.hint.ids, id); !found {
			m.hint.ids = slices.Insert(m.hint.ids, i, id)
		}
	}
	if len(m.hint.ids) > maxHintIDs {
		m.hint = hint{from: m.hint.from, all: true}
	}
}

// markLeft marks our roster entry left: idempotent, so retried until it
// lands, ctx ends, the table says this host is down ([ErrDown]), or a
// LeaseDuration has passed since the start of our last beat that landed:
// by then the other hosts count us out without it.
func (m *member) markLeft(ctx context.Context) error {
	m.mu.Lock()
	giveUp := m.lastOK.Add(m.c.cfg.LeaseDuration)
	m.mu.Unlock()
	// Bounded on the wall clock too: the Config's may be a manual one
	// that stands still while we retry.
	began := time.Now()
	expired := func() bool {
		return !m.c.now().Before(giveUp) || time.Since(began) >= m.c.cfg.LeaseDuration
	}
	for attempt := 0; ; attempt++ {
		done, err := m.tryMarkLeft(ctx)
		switch {
		case done:
			return nil
		case fatal(err) || errors.Is(err, ErrDown) || expired() || sleep(ctx, backoff(attempt)) != nil:
			return fmt.Errorf("fleet: host %s leaving stream %s: %w (its heartbeat expires instead)", m.me, m.stream, err)
		}
	}
}

// tryMarkLeft writes our roster entry left once, over the entry we last
// knew. When the write fails or its answer is lost it reads the roster:
// done if the entry is left (or gone); otherwise the entry read is the
// one the next try writes over, and the error is an [ErrConflict].
func (m *member) tryMarkLeft(ctx context.Context) (done bool, err error) {
	m.mu.Lock()
	next := m.nextEntry()
	next.left = true
	old := ""
	if m.entryKnown {
		old = m.entryRaw
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
	defer cancel()
	_, err = m.c.table.SetEntry(ctx, m.part, keyRoster, fieldBeats, m.me, old, next.String())
	if err == nil || fatal(err) {
		return err == nil, err
	}
	it, rerr := m.c.table.Get(ctx, m.part, keyRoster)
	if fatal(rerr) {
		return false, rerr
	}
	if rerr != nil {
		return false, errors.Join(err, rerr)
	}
	r, rerr := decodeRoster(it)
	if rerr != nil {
		return false, rerr
	}
	b, ok := r.beats[m.me]
	if _, bad := r.bad[m.me]; bad {
		// Undecodable (edited by hand): the next try writes over it.
		m.mu.Lock()
		m.knowEntry(r)
		m.mu.Unlock()
		return false, fmt.Errorf("%w: our roster entry does not decode (%w)", ErrConflict, r.bad[m.me])
	}
	if !ok || b.left {
		return true, nil
	}
	m.mu.Lock()
	m.knowEntry(r)
	m.mu.Unlock()
	return false, fmt.Errorf("%w: our roster entry is not left (%w)", ErrConflict, err)
}

// flush writes the positions of our leases, one entry per shard, in
// chunks of chunkEntries, when a Commit moved one since the last write
// and CheckpointInterval passed (force: at once). A chunk whose write
// fails stays dirty: the next round writes it again. Called with
// m.beatMu held (by the beat), or by Leave after the rounds stopped
// (flushLeaving), its calls under parent (the rounds' context is
// cancelled by then).
//
// The interval is counted less half a round: rounds are not exactly
// RenewInterval apart (a tick delivered late, then one on time; a beat
// slower in one round than in the next), and a round a little early on
// the last write must not wait a whole round more: with the default
// CheckpointInterval (RenewInterval) every round writes the positions
// that moved, so every commit is durable within one round.
//
// The first chunk carries our heartbeat counter as the round's beat set
// it (see beatInChunk). flushUnder reports whether that chunk was
// written with it.
func (m *member) flush(force bool) { m.flushUnder(m.ctx, force) }

func (m *member) flushUnder(parent context.Context, force bool) (first bool) {
	m.mu.Lock()
	now := m.c.now()
	due := now.Sub(m.flushedAt) >= m.c.cfg.CheckpointInterval-m.c.cfg.RenewInterval/2
	if m.left && !force || !m.dirty || !force && !due {
		m.mu.Unlock()
		return false
	}
	counter := strconv.FormatUint(m.chunkBeat, 10)
	entries := make(map[string]string, len(m.held)+len(m.orphans))
	for id, e := range m.orphans {
		entries[id] = e.String()
	}
	for id, l := range m.held {
		if e, ok := l.entry(); ok {
			entries[id] = e.String()
		}
	}
	chunks := m.assignChunks(entries)
	versions := slices.Clone(m.posVersions)
	m.dirty = false
	m.mu.Unlock()
	ok := true
	pp := posPartition(m.part, m.me)
	for i, ch := range chunks {
		v := uint64(0)
		if i < len(versions) {
			v = versions[i]
		}
		ctx, cancel := context.WithTimeout(parent, m.c.cfg.CallTimeout)
		it := Item{Partition: pp, Key: prefixPos + strconv.Itoa(i), Version: v, Maps: map[string]map[string]string{fieldPos: ch}}
		if i == 0 {
			it.Fields = map[string]string{fieldBeat: counter}
		}
		stored, err := m.c.table.Put(ctx, it)
		if err != nil && !fatal(err) {
			// Read back the version: the write landed (its answer was
			// lost), or an earlier life of ours wrote the chunk.
			if got, gerr := m.c.table.Get(ctx, pp, it.Key); gerr == nil {
				if same := got.Exists() && maps.Equal(got.Maps[fieldPos], ch) && got.Field(fieldBeat) == it.Field(fieldBeat); same {
					stored, err = got, nil
				} else {
					v = got.Version
				}
			}
		}
		cancel()
		switch {
		case fatal(err):
			m.fail("writing the positions", err)
			return false
		case err != nil:
			ok = false
		case i == 0:
			first = true
		}
		for len(versions) <= i {
			versions = append(versions, 0)
		}
		if err == nil {
			versions[i] = stored.Version
		} else {
			versions[i] = v
		}
	}
	// Chunks past the ones written hold shards we no longer have: deleted
	// once every chunk before them landed (assignChunks moves no shard,
	// but a failed write may leave them holding what is durable nowhere
	// else, as after a restart that recovered them).
	for i := len(chunks); ok && i < len(versions); i++ {
		if versions[i] == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(parent, m.c.cfg.CallTimeout)
		err := m.c.table.Delete(ctx, pp, prefixPos+strconv.Itoa(i), versions[i])
		cancel()
		if err == nil || errors.Is(err, ErrConflict) {
			versions[i] = 0
		}
	}
	for len(versions) > len(chunks) && versions[len(versions)-1] == 0 {
		versions = versions[:len(versions)-1]
	}
	m.mu.Lock()
	m.posVersions = versions
	if ok {
		m.flushedAt = now
	} else {
		m.dirty = true
	}
	m.mu.Unlock()
	return first
}

// assignChunks splits entries, by shard, into the chunks of our
// positions. A shard keeps its chunk for as long as it has an entry, and
// a new one goes to the first chunk with room: a shard moved from one
// chunk to another would be in neither when the write of the one that
// gains it fails and that of the one that loses it lands. A host with no
// entry writes one empty chunk. m.mu must be held.
func (m *member) assignChunks(entries map[string]string) []map[string]string {
	if m.posChunk == nil {
		m.posChunk = map[string]int{}
	}
	var counts []int
	for id, c := range m.posChunk {
		if _, ok := entries[id]; !ok {
			delete(m.posChunk, id)
			continue
		}
		for len(counts) <= c {
			counts = append(counts, 0)
		}
		counts[c]++
	}
	var fresh []string
	for id := range entries {
		if _, ok := m.posChunk[id]; !ok {
			fresh = append(fresh, id)
		}
	}
	slices.Sort(fresh)
	for _, id := range fresh {
		c := slices.IndexFunc(counts, func(n int) bool { return n < chunkEntries })
		if c < 0 {
			c = len(counts)
			counts = append(counts, 0)
		}
		m.posChunk[id] = c
		counts[c]++
	}
	for len(counts) > 0 && counts[len(counts)-1] == 0 {
		counts = counts[:len(counts)-1]
	}
	chunks := make([]map[string]string, max(len(counts), 1))
	for i := range chunks {
		n := 0
		if i < len(counts) {
			n = counts[i]
		}
		chunks[i] = make(map[string]string, n)
	}
	for id, c := range m.posChunk {
		chunks[c][id] = entries[id]
	}
	return chunks
}

// flushLeaving writes our positions as Leave goes, when they hold what
// no shard item does (a release that failed kept its position there, a
// lease lost kept its own): retried until it lands, ctx ends, the table
// says this host is down, or a LeaseDuration has passed since the start
// of our last beat that landed (as markLeft). Without it they stayed in
// memory: the next owner resumed at the last round's write.
func (m *member) flushLeaving(ctx context.Context) error {
	m.mu.Lock()
	giveUp := m.lastOK.Add(m.c.cfg.LeaseDuration)
	m.dirty = true
	m.mu.Unlock()
	began := time.Now()
	for attempt := 0; ; attempt++ {
		m.flushUnder(ctx, true)
		m.mu.Lock()
		done, over := !m.dirty, m.over
		m.mu.Unlock()
		switch {
		case done:
			return nil
		case over != nil:
			return over
		case !m.c.now().Before(giveUp) || time.Since(began) >= m.c.cfg.LeaseDuration:
			return fmt.Errorf("fleet: host %s leaving stream %s: its positions could not be written (the shards they hold resume from their items' positions)", m.me, m.stream)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return fmt.Errorf("fleet: host %s leaving stream %s: writing its positions: %w", m.me, m.stream, err)
		}
	}
}

// dropPositions deletes our positions once every lease is released: they
// hold nothing another host needs. Best effort.
func (m *member) dropPositions(ctx context.Context) {
	pp := posPartition(m.part, m.me)
	cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
	defer cancel()
	items, err := m.c.table.Query(cctx, pp)
	if err != nil {
		return
	}
	for _, it := range items {
		_ = m.c.table.Delete(cctx, pp, it.Key, it.Version)
	}
}

// recover folds into the shard items the positions an earlier life of
// this host (the same HostID, restarted) left in its chunks, for the
// shards the items still name it the owner of at that epoch, so that the
// chunks can be written afresh: this life reclaims those shards from the
// items.
func (m *member) recover(ctx context.Context) error {
	pp := posPartition(m.part, m.me)
	items, err := m.c.table.Query(ctx, pp)
	if err != nil {
		if fatal(err) {
			return fmt.Errorf("fleet: host %s joining stream %s: reading its positions: %w", m.me, m.stream, err)
		}
		return nil // unknown: the chunks stay; a takeover reads them
	}
	entries := m.positionsDecoded(m.me, items)
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		e := entries[id]
		err := m.updateWaiting(ctx, id, "fold an earlier life's positions", func(s *shardItem) *shardItem {
			if !s.exists() || s.owner != m.me || s.epoch != e.epoch {
				return nil
			}
			p := kinesisload.MergeProgress(s.prog, kinesisload.ShardProgress{ShardID: id, Position: e.pos})
			if same(p, s.prog) {
				return nil
			}
			return s.with(p, "")
		})
		if err != nil {
			return fmt.Errorf("fleet: host %s joining stream %s: folding its positions into shard %s: %w", m.me, m.stream, id, err)
		}
	}
	if err := m.releaseEarlierLife(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	for _, it := range items {
		n, ok := strings.CutPrefix(it.Key, prefixPos)
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 0 || i > 1<<20 {
			continue
		}
		if c, err := strconv.ParseUint(it.Field(fieldBeat), 10, 64); err == nil && i == 0 {
			// Our counters go on from an earlier life's: a watcher
			// that read its chunk sees ours move.
			m.chunkBeat = max(m.chunkBeat, c)
		}
		for len(m.posVersions) <= i {
			m.posVersions = append(m.posVersions, 0)
		}
		m.posVersions[i] = it.Version
	}
	m.dirty = len(items) > 0 // written afresh at the first round
	m.mu.Unlock()
	return nil
}

// releaseEarlierLife releases the shards an earlier life of this host (a
// process that ran under the same HostID, such as a pod's stable name)
// owned, after recover folded that life's positions into their items: the
// new life holds no lease on them, and while it beats under the name no
// other host takes them for a dead host's; a handoff another host asked
// of the earlier life would wait for ever. Released, they are free for
// every host (a handoff request stays as the asker's reservation), and the
// next owner's take fences that life by the epoch. Called by Join, before
// this life takes anything.
func (m *member) releaseEarlierLife(ctx context.Context) error {
	items, err := m.c.table.Query(ctx, m.part)
	if err != nil {
		if fatal(err) {
			return fmt.Errorf("fleet: host %s joining stream %s: reading the shards: %w", m.me, m.stream, err)
		}
		return nil // unknown: see below
	}
	for _, it := range items {
		id, ok := shardID(it.Key)
		if !ok || it.Field("owner") != m.me {
			continue
		}
		err := m.update(ctx, id, nil, func(s *shardItem) *shardItem {
			if !s.exists() || s.owner != m.me {
				return nil
			}
			n := *s
			n.owner = ""
			return &n
		})
		if errors.Is(err, ErrBadItem) {
			return fmt.Errorf("fleet: host %s joining stream %s: releasing shard %s of its earlier life: %w", m.me, m.stream, id, err)
		}
		// Otherwise (the table unreachable): the shard stays ours, free
		// for us to take back, and given up if another host asks for it
		// (see decide).
	}
	return nil
}

// watchFleet is how many times a lease duration the fleet as a whole
// reads the first chunk of a host that beats there: each of the others
// reads it every LeaseDuration x (hosts-1) / watchFleet, at a phase of
// its own, so that a host's death is seen about LeaseDuration/watchFleet
// after it wherever the fleet's size, and the reads cost the fleet
// watchFleet reads of every position a lease duration.
const watchFleet = 20

// watchEvery is how long we leave a host that beats in its first chunk
// without reading it, as others see it: LeaseDuration x (hosts-1) /
// watchFleet, at least a round and at most a lease duration (a small
// fleet reads every busy host every round, as the roster's answer shows
// every beat every round: a death is seen as soon as before). Each read
// answers the counter alone (GetField). m.mu must be held.
func (m *member) watchEvery(now time.Time) time.Duration {
	cfg := m.c.cfg
	others := 0
	for id, s := range m.seen {
		if id != m.me && !s.left && s.known() && !m.still(s, now) {
			others++
		}
	}
	every := cfg.LeaseDuration * time.Duration(others) / watchFleet
	return min(max(every, cfg.RenewInterval), cfg.LeaseDuration)
}

// watch reads the counter on the first chunk of every host whose entry
// lets it beat there and that has not beaten in the roster for a few
// rounds (it beats in its chunk, or is gone) or whose counter there moved
// within a lease duration (a busy host whose rounds go back and forth
// between the two, as while its hint stands), once every watchEvery, and
// of every such host that may be gone (no sign for a lease duration) but
// was not read since: a counter that moved since our last read of it (or, at our
// first, one past its entry's) is a beat, as in the roster. Without the
// reads the host would never count as gone (see still).
//
// Each of us reads a host once per interval of watchEvery, at a phase of
// its own (see slot), so that the fleet's reads of it are spread over the
// interval: one comes soon after a death. The routine reads of a round stop after half a round,
// so that a slow table does not delay our next beat; the rest are made
// next round. Called with m.beatMu held.
func (m *member) watch() {
	m.mu.Lock()
	start := m.c.now()
	// A read from s.at + counts counts for still (see there).
	counts, slack := m.c.cfg.LeaseDuration-m.c.cfg.RenewInterval, m.c.cfg.RenewInterval/2
	every := m.watchEvery(start)
	var gone, due []string
	for id, s := range m.seen {
		switch {
		case id == m.me || !s.chunked:
		case start.Sub(s.at) >= counts && s.chunkAt.Before(s.at.Add(counts)):
			gone = append(gone, id)
		case (s.watched.IsZero() || slot(start, every, m.me, id) > slot(s.watched, every, m.me, id)) &&
			(start.Sub(s.moved) >= 3*m.c.cfg.RenewInterval-slack || start.Sub(s.chunkMoved) < m.c.cfg.LeaseDuration):
			due = append(due, id)
		}
	}
	m.mu.Unlock()
	slices.Sort(gone)
	slices.Sort(due)
	for i, id := range append(gone, due...) {
		if i >= len(gone) && m.c.now().Sub(start) >= slack {
			return
		}
		if !m.readBeat(id, start) {
			return
		}
	}
}

// readBeat reads the counter on host id's first chunk (see watch) for
// our watch that began at start, and reports false when the session must
// stop (a fatal error).
func (m *member) readBeat(id string, start time.Time) bool {
	began := m.c.now()
	ctx, cancel := context.WithTimeout(m.ctx, m.c.cfg.CallTimeout)
	it, err := m.c.table.GetField(ctx, posPartition(m.part, id), prefixPos+"0", fieldBeat)
	cancel()
	if fatal(err) {
		m.fail("reading a host's positions", err)
		return false
	}
	if err != nil {
		return true // read again next round
	}
	c, _ := strconv.ParseUint(it.Field(fieldBeat), 10, 64) // none, or edited by hand: 0
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.seen[id]
	if !ok || !s.chunked {
		return true
	}
	if moved := !s.chunkAt.IsZero() && c != s.chunk || s.chunkAt.IsZero() && c > s.counter && s.known(); moved {
		s.at = m.c.now() // after the read, as observe times the roster's
		s.chunkMoved = s.at
	}
	s.chunk = c
	if began.After(s.chunkAt) {
		s.chunkAt = began
	}
	if start.After(s.watched) {
		s.watched = start
	}
	m.seen[id] = s
	return true
}

// slot numbers the intervals of every in which host me reads host id's
// beat: they start at a phase of their own, a fraction of every drawn
// from both names, so that the hosts watching id read it at phases
// spread over the interval whatever happened before (a read in a slot
// later than the last one read is due).
func slot(now time.Time, every time.Duration, me, id string) int64 {
	h := fnv.New64a()
	h.Write([]byte(me))
	h.Write([]byte{0})
	h.Write([]byte(id))
	phase := float64(h.Sum64()>>11) / (1 << 53)
	return int64(float64(now.UnixNano())/float64(every) + phase)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
