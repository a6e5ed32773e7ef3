package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// This file is the stream's generations: the identity item names the
// generation in force; a fleet-wide start-over (a stream re-created under
// the name) moves it to the next, and the old generation's items stay as
// its archive.

// readIdentity reads the stream's identity item (in the stream's own
// partition), retrying transient errors.
func (m *member) readIdentity(ctx context.Context) (identityItem, error) {
	it, err := getWaiting(ctx, m.c.table, m.stream, keyIdentity)
	if err != nil {
		if fatal(err) {
			return identityItem{}, fmt.Errorf("fleet: stream %s: reading the identity item: %w", m.stream, err)
		}
		return identityItem{}, err
	}
	ii, err := decodeIdentity(it)
	if err != nil {
		return ii, fmt.Errorf("fleet: stream %s: %w", m.stream, err)
	}
	return ii, nil
}

// readIdentityInForce reads the identity item as readIdentity does, and
// refuses an absent one that a fleet of generation 0 cannot take for "not
// identified yet": the fleet shows it read the stream (see
// checkIdentityGone; [ErrIdentityMissing]).
// A session that took it so would write the stream it sees now as the
// fleet's, and read a stream re-created meanwhile from the old one's
// positions.
func (m *member) readIdentityInForce(ctx context.Context) (identityItem, error) {
	for {
		ii, err := m.readIdentity(ctx)
		if err != nil || ii.item.Exists() || m.gen > 0 {
			return ii, err
		}
		// Its reads wait out a failing table themselves.
		switch err := m.checkIdentityGone(ctx); {
		case err == nil:
			return ii, nil
		case !errors.Is(err, errIdentityAppeared):
			return identityItem{}, err
		}
	}
}

// checkIdentityGone refuses this member's stream, whose identity item was
// read absent, when the fleet shows it read the stream (see the function).
func (m *member) checkIdentityGone(ctx context.Context) error {
	return checkIdentityGone(ctx, m.c.table, m.stream)
}

// checkIdentityGone refuses stream, whose identity item was read absent,
// when the fleet shows it read the stream: a generation later than the
// first has items, the first's initialisation was committed with an
// identity, or (its init item gone too) a shard item of the first was
// owned, a host of its roster holds positions, or its roster counts a
// host's changes. The identity item was deleted by hand then, and taking the stream
// seen now for the fleet's would read a stream re-created meanwhile from
// the old one's positions ([ErrIdentityMissing]). It returns
// errIdentityAppeared when the item is there when read again (written
// meanwhile by a first initialisation).
func checkIdentityGone(ctx context.Context, table Table, stream string) error {
	last, err := lastGenerationAfter(ctx, table, stream, 0)
	if err != nil {
		return err
	}
	if last == 0 {
		// Generation 0 itself: an initialisation committed there had
		// the identity written first. Taking the stream seen now for
		// it would read a stream re-created meanwhile from the old
		// stream's positions.
		it, err := getWaiting(ctx, table, partition(stream, 0), keyInit)
		if err != nil {
			return fmt.Errorf("fleet: stream %s: reading the init item: %w", stream, err)
		}
		ii, err := decodeInit(it)
		if err != nil {
			return err
		}
		if ii.committed == "" {
			// No initialisation committed, or its item deleted too: a
			// shard item a host owned says the fleet read the stream
			// (an initialisation's items, and those fleet.Import
			// writes, were never owned: their epoch is their first).
			var snap *snapshot
			err := readWaiting(ctx, func() (err error) {
				snap, err = query(ctx, table, partition(stream, 0))
				return err
			})
			if err != nil {
				return fmt.Errorf("fleet: stream %s: reading generation 0: %w", stream, err)
			}
			for _, id := range slices.Sorted(maps.Keys(snap.shards)) {
				if s := snap.shards[id]; s.epoch > s.base {
					if appeared(ctx, table, stream) {
						return errIdentityAppeared
					}
					return fmt.Errorf("%w: stream %s has shard items hosts owned (such as %s, at epoch %d) but neither an identity item nor a committed init item in partition %s: "+
						"restore the identity item (key %q) naming the stream the fleet read, for example from an export made before (tidemark export has it); nothing was read or written",
						ErrIdentityMissing, stream, id, s.epoch, stream, keyIdentity)
				}
			}
			// Nor a shard item (deleted by hand too): a host's positions
			// hold what it read under a lease.
			host, err := readUnderLease(ctx, table, stream, snap.roster)
			if err != nil {
				return fmt.Errorf("fleet: stream %s: reading the hosts' positions: %w", stream, err)
			}
			if host != "" {
				if appeared(ctx, table, stream) {
					return errIdentityAppeared
				}
				return fmt.Errorf("%w: stream %s has positions host %s committed under a lease (partition %s) but neither an identity item nor a committed init item nor an owned shard item in partition %s: "+
					"restore the identity item (key %q) naming the stream the fleet read, and the shard items, for example from an export made before (tidemark export has them); nothing was read or written",
					ErrIdentityMissing, stream, host, posPartition(partition(stream, 0), host), stream, keyIdentity)
			}
			// Nor positions (deleted by hand too): a host whose roster
			// entry counts changes took a lease or saved progress, which
			// only an initialised fleet does (seed 249704821).
			for _, host := range slices.Sorted(maps.Keys(snap.roster.beats)) {
				if b := snap.roster.beats[host]; b.changes > 0 {
					if appeared(ctx, table, stream) {
						return errIdentityAppeared
					}
					return fmt.Errorf("%w: stream %s has a roster whose host %s made %d changes (it took leases or saved progress) but neither an identity item nor a committed init item, an owned shard item or a host's positions in partition %s: "+
						"restore the identity item (key %q) naming the stream the fleet read, and the shard items, for example from an export made before (tidemark export has them); nothing was read or written",
						ErrIdentityMissing, stream, host, b.changes, stream, keyIdentity)
				}
			}
			return nil
		}
		if !ii.identified {
			return nil
		}
		if appeared(ctx, table, stream) {
			return errIdentityAppeared
		}
		return fmt.Errorf("%w: stream %s was initialised with an identity (its init item in partition %s says so) but has no identity item: "+
			"restore the identity item (key %q) naming the stream the fleet reads, for example from an export made before, "+
			"or from Coordinator.Inspect of a host still running; nothing was read or written",
			ErrIdentityMissing, stream, stream, keyIdentity)
	}
	return fmt.Errorf("%w: stream %s has items of generation %d (partition %s) but no identity item in partition %s: "+
		"restore the identity item (key %q) naming the stream the fleet reads and \"gen\" = %d (the archived generations, if known, in \"archived\"), "+
		"for example from an export made before, or from Coordinator.Inspect of a host still running; nothing was read or written",
		ErrIdentityMissing, stream, last, partition(stream, last), stream, keyIdentity, last)
}

// appeared reports whether stream's identity item exists when read again.
// It is written before an initialisation commits, and before a shard is
// taken: read after the init item or the shards, it may be there now
// although it was not when read first.
func appeared(ctx context.Context, table Table, stream string) bool {
	it, err := getWaiting(ctx, table, stream, keyIdentity)
	return err == nil && it.Exists()
}

// readWaiting runs read, a read of the table, again after each failure of
// unknown outcome (a read failed, throttled, an outage), with backoff,
// until it succeeds, fails for good (its error), or ctx ends (ctx's).
func readWaiting(ctx context.Context, read func() error) error {
	for attempt := 0; ; attempt++ {
		err := read()
		if err == nil || fatal(err) {
			return err
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// getWaiting is table.Get through readWaiting.
func getWaiting(ctx context.Context, table Table, partition, key string) (it Item, err error) {
	err = readWaiting(ctx, func() (err error) {
		it, err = table.Get(ctx, partition, key)
		return err
	})
	return it, err
}

// readGen checks the generation in force after a round's read (the
// identity item: in snap for generation 0, read apart otherwise) and
// voids the session when the fleet started over; a round that began at
// began and could not read it counts towards genDue. It reports whether
// the round may go on: the generation was read, and is the session's.
func (m *member) readGen(began time.Time, snap *snapshot) bool {
	var ii identityItem
	var err error
	switch {
	case snap != nil && m.gen == 0:
		ii = snap.ident
	default:
		ctx, cancel := m.callCtx()
		var it Item
		if it, err = m.c.table.Get(ctx, m.stream, keyIdentity); err == nil {
			ii, err = decodeIdentity(it)
		}
		cancel()
	}
	if fatal(err) {
		m.fail("reading the identity item", err)
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err == nil:
		m.genBad = time.Time{}
	case m.genBad.IsZero():
		m.genBad = began
	}
	if err != nil {
		return false
	}
	if ii.gen > m.gen {
		m.voidWith(ii)
		return false
	}
	if m.behindLocked(ii) {
		return false
	}
	return m.over == nil
}

// behindLocked ends the session with [ErrIdentityBehind] when ii, the
// identity item as read, names a generation before the session's: it was
// restored from a backup older than the start-over. It reports whether it
// did. m.mu must be held.
func (m *member) behindLocked(ii identityItem) bool {
	if !ii.item.Exists() || ii.gen >= m.gen {
		return false
	}
	if m.over == nil {
		m.over = fmt.Errorf("fleet: host %s, stream %s: %w: the item names generation %d, this session is of generation %d, written there when the fleet started over: "+
			"it was restored from a backup older than that; restore it with \"gen\" = %d and the stream generation %d reads (its ARN and creation time, as DescribeStreamSummary gives them now), for example from an export made since",
			m.me, m.stream, ErrIdentityBehind, ii.gen, m.gen, m.gen, m.gen)
		m.signal()
	}
	return true
}

// voidLocked voids the session when the roster of its generation names a
// later one (see voidWith). m.mu must be held.
func (m *member) voidLocked(next uint64) {
	m.voidWith(identityItem{gen: next})
}

// voidWith ends the session when ii, the identity item as read, is of a
// later generation than the session's: every lease is lost
// ([kinesisload.LostStartedOver]), and Acquire returns the error, which
// wraps a [*kinesisload.StreamMismatchError]. m.mu must be held.
func (m *member) voidWith(ii identityItem) {
	if ii.gen <= m.gen || m.over != nil && !(m.voided && m.overID.IsZero() && !ii.id.IsZero()) {
		return
	}
	// (A session voided by the roster's mark knows the new identity
	// once it reads the identity item: its error says it then.)
	m.voided, m.overID = true, ii.id
	var old kinesisload.StreamIdentity
	for _, a := range ii.archived {
		if a.Gen == m.gen {
			old = a.Identity
		}
	}
	m.over = fmt.Errorf("fleet: stream %s: the fleet started over in generation %d, on the stream re-created under the name; "+
		"this session belongs to generation %d: %w", m.stream, ii.gen, m.gen,
		&kinesisload.StreamMismatchError{Stream: m.stream, Stored: old, Current: ii.id})
	reason := fmt.Sprintf("the fleet started over in generation %d (the stream was re-created)", ii.gen)
	for _, l := range m.held {
		m.lose(l, kinesisload.LostStartedOver, reason)
	}
	for _, l := range m.granted {
		l.markLost(kinesisload.LostStartedOver, reason)
	}
	m.granted = nil
	m.signal()
}

// void reads the identity item and voids the session when its generation
// is past the session's; it returns the session's error (nil while its
// generation is in force).
func (m *member) void(ctx context.Context) error {
	ii, err := m.readIdentity(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.voidWith(ii)
	return m.over
}

// readUnderLease returns a host of generation 0's roster r whose
// positions hold an entry ("": none): it read the stream under a lease,
// which only an initialisation committed grants.
func readUnderLease(ctx context.Context, table Table, stream string, r roster) (string, error) {
	found := ""
	err := eachHostsPositions(ctx, table, partition(stream, 0), r, func(host string, items []Item) bool {
		for _, it := range items {
			if len(it.Maps[fieldPos]) > 0 {
				found = host
				return false
			}
		}
		return true
	})
	return found, err
}

// eachHostsPositions reads the positions (in partition part's
// generation) of every host of roster r, in the order of their IDs, and
// hands them to fn until it returns false.
func eachHostsPositions(ctx context.Context, table Table, part string, r roster, fn func(host string, items []Item) bool) error {
	for _, host := range slices.Sorted(maps.Keys(r.raw)) {
		var items []Item
		err := readWaiting(ctx, func() (err error) {
			items, err = table.Query(ctx, posPartition(part, host))
			return err
		})
		if err != nil {
			return err
		}
		if !fn(host, items) {
			return nil
		}
	}
	return nil
}

// laterGeneration returns the latest generation after gen the table
// shows the fleet moved to (gen when none): the mark of a start-over in
// gen's roster, or the items (init, roster) of a later generation. Both
// are written only after the identity item named that generation.
func laterGeneration(ctx context.Context, table Table, stream string, gen uint64) (uint64, error) {
	it, err := getWaiting(ctx, table, partition(stream, gen), keyRoster)
	if err != nil {
		return 0, fmt.Errorf("fleet: stream %s: reading generation %d's roster: %w", stream, gen, err)
	}
	r, err := decodeRoster(it)
	if err != nil {
		return 0, err
	}
	last, err := lastGenerationAfter(ctx, table, stream, gen)
	if err != nil {
		return 0, err
	}
	return max(r.next, last), nil
}

// lastGenerationAfter returns the last of the generations after gen that
// have items (init, roster), up to the first without (each start-over's
// hosts join the one after it); gen when none has.
func lastGenerationAfter(ctx context.Context, table Table, stream string, gen uint64) (uint64, error) {
	last := gen
	for g := gen + 1; g > gen; g++ { // g > gen: a gen of 2^64-1, edited by hand, ends the scan
		found := false
		for _, key := range []string{keyInit, keyRoster} {
			it, err := getWaiting(ctx, table, partition(stream, g), key)
			if err != nil {
				return 0, fmt.Errorf("fleet: stream %s: looking for generation %d: %w", stream, g, err)
			}
			found = found || it.Exists()
		}
		if !found {
			break
		}
		last = g
	}
	return last, nil
}

// checkBehind refuses ii, stream's identity item as read (present), when
// the table shows the fleet started over past its generation since: the
// item went back, restored from a backup taken before ([ErrIdentityBehind],
// naming the generation to restore). It returns errGenMoved when the item,
// read again, names a later generation than ii (a start-over meanwhile):
// the caller reads it again.
func checkBehind(ctx context.Context, table Table, stream string, ii identityItem) error {
	later, err := laterGeneration(ctx, table, stream, ii.gen)
	if err != nil || later == ii.gen {
		return err
	}
	it, err := getWaiting(ctx, table, stream, keyIdentity)
	if err != nil {
		return fmt.Errorf("fleet: stream %s: reading the identity item: %w", stream, err)
	}
	again, err := decodeIdentity(it)
	if err != nil {
		return fmt.Errorf("fleet: stream %s: %w", stream, err)
	}
	if !it.Exists() || again.gen > ii.gen {
		return errGenMoved
	}
	return fmt.Errorf("fleet: stream %s: %w: the identity item (key %q) names generation %d, but the fleet started over to generation %d since (partition %s): "+
		"it was restored from a backup older than that; restore it with \"gen\" = %d and the stream generation %d reads (its ARN and creation time, as DescribeStreamSummary gives them now), "+
		"for example from an export made since (Inspect reads the item as it is now); nothing was read or written",
		stream, ErrIdentityBehind, keyIdentity, ii.gen, later, partition(stream, later), later, later)
}
