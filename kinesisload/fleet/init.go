package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// This file is the fleet's initialisation: one host wins a lock (a
// conditional write of the init item with a fresh token), resolves and
// saves the batch as pending positions under its token, and commits it by
// naming the token in the init item; only then is it visible. A holder
// that dies, or that makes no progress for Config.InitStallTimeout, loses
// the lock to another host, and its commit is refused (fenced by its
// token).

// Initialise implements [kinesisload.Membership].
func (m *member) Initialise(ctx context.Context, init kinesisload.InitFunc) error {
	var watch lockWatch
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A session of a generation the fleet left initialises nothing.
		if err := m.void(ctx); err != nil {
			return err
		}
		it, err := m.c.table.Get(ctx, m.part, keyInit)
		var ii initItem
		if err == nil {
			ii, err = decodeInit(it)
		}
		switch {
		case fatal(err):
			return fmt.Errorf("fleet: stream %s: reading the initialisation item: %w", m.stream, err)
		case err != nil:
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		if ii.committed != "" {
			m.mu.Lock()
			m.committed = ii.committed
			m.mu.Unlock()
			return init(ctx, sharedStore{m: m, fresh: true})
		}
		if m.lockBusy(ii, &watch) {
			// Wait for a round: the holder commits, or is seen dead or
			// stalled.
			select {
			case <-m.nextRound():
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		token := newToken()
		ok, err := m.lock(ctx, ii, token)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := m.initialise(ctx, init, token); err != nil {
			return err
		}
		return nil
	}
}

// lockWatch is what a host waiting for the initialisation lock saw of it:
// the holder's token and progress, and when they last moved on its clock.
type lockWatch struct {
	token    string
	progress uint64
	at       time.Time
}

// lockBusy reports whether another host holds the lock and works: it is
// alive (or not observed yet) and its progress moved within
// InitStallTimeout on our clock.
func (m *member) lockBusy(ii initItem, w *lockWatch) bool {
	if ii.lockOwner == "" || ii.lockOwner == m.me {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.c.now()
	if w.token != ii.lockToken || w.progress != ii.progress || w.at.IsZero() {
		*w = lockWatch{token: ii.lockToken, progress: ii.progress, at: now}
	}
	if now.Sub(w.at) >= m.c.cfg.InitStallTimeout {
		m.c.cfg.Logger.Warn("fleet: the holder of the initialisation lock made no progress; taking the lock over",
			"stream", m.stream, "holder", ii.lockOwner, "for", now.Sub(w.at))
		return false
	}
	return m.aliveOrUnknown(ii.lockOwner, now)
}

// lock writes the initialisation lock with token; ok reports whether we
// hold it. The first holder's T0 outlives it.
func (m *member) lock(ctx context.Context, was initItem, token string) (ok bool, err error) {
	next := initItem{item: was.item, lockOwner: m.me, lockToken: token, t0: was.t0}
	cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
	_, err = m.c.table.Put(cctx, next.encode(m.part))
	cancel()
	switch {
	case err == nil:
		return true, nil
	case fatal(err):
		return false, fmt.Errorf("fleet: stream %s: writing the initialisation lock: %w", m.stream, err)
	}
	// Refused or unknown: read back.
	for attempt := 0; ; attempt++ {
		it, err := m.c.table.Get(ctx, m.part, keyInit)
		if err == nil {
			ii, err := decodeInit(it)
			if err != nil {
				return false, err
			}
			return ii.lockToken == token && ii.committed == "", nil
		}
		if fatal(err) {
			return false, fmt.Errorf("fleet: stream %s: reading the initialisation item: %w", m.stream, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return false, err
		}
	}
}

// initialise runs init under the lock of token, with a staging store, and
// commits its batch. While init runs, its signs of progress are written
// into the init item once a round (see lockProgress), so that the other
// hosts can tell a holder that works from one that is stuck.
func (m *member) initialise(ctx context.Context, init kinesisload.InitFunc, token string) error {
	st := stagingStore{m: m, batch: token, progress: new(atomic.Uint64)}
	m.mu.Lock()
	m.initLock = &heldLock{token: token, progress: st.progress}
	m.mu.Unlock()
	err := init(ctx, st)
	m.mu.Lock()
	m.initLock = nil
	m.mu.Unlock()
	if err != nil {
		m.unlock(token)
		return err
	}
	return m.commitInit(ctx, token)
}

// heldLock is the initialisation lock this host holds while its init
// runs: its token, the init's signs of progress, and how many of them
// the init item says.
type heldLock struct {
	token    string
	progress *atomic.Uint64
	written  uint64
}

// keepLock writes the init's progress into the init item, on condition
// that the lock is still ours, when it moved since the last write: once a
// round, by the heartbeat. Called with m.beatMu held.
func (m *member) keepLock() {
	m.mu.Lock()
	hl := m.initLock
	m.mu.Unlock()
	if hl == nil {
		return
	}
	n := hl.progress.Load()
	if n == hl.written {
		return
	}
	ctx, cancel := m.callCtx()
	defer cancel()
	it, err := m.c.table.Get(ctx, m.part, keyInit)
	if err != nil {
		return
	}
	ii, err := decodeInit(it)
	if err != nil || ii.lockToken != hl.token || ii.committed != "" {
		return
	}
	ii.progress = max(ii.progress, n)
	if _, err := m.c.table.Put(ctx, ii.encode(m.part)); err == nil {
		hl.written = n
	}
}

// unlock clears the lock after a failed init, so that another host need
// not wait for this one's expiry. Best effort.
func (m *member) unlock(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.CallTimeout)
	defer cancel()
	it, err := m.c.table.Get(ctx, m.part, keyInit)
	if err != nil {
		return
	}
	ii, err := decodeInit(it)
	if err != nil || ii.lockToken != token || ii.committed != "" {
		return
	}
	ii.lockOwner = ""
	_, _ = m.c.table.Put(ctx, ii.encode(m.part))
}

// commitInit names the batch token in the init item, on condition that
// the lock is still ours and nothing is committed.
func (m *member) commitInit(ctx context.Context, token string) error {
	lost := func(why kinesisload.LostReason, reason string) error {
		return &kinesisload.LeaseLostError{Stream: m.stream, Why: why, Reason: reason}
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.mu.Lock()
		fenced := m.fenced || m.fenceDue(m.c.now())
		m.mu.Unlock()
		if fenced {
			return lost(kinesisload.LostSelfFenced, "fenced before the commit: no heartbeat landed for too long")
		}
		cctx, cancel := context.WithTimeout(ctx, m.c.cfg.CallTimeout)
		it, err := m.c.table.Get(cctx, m.part, keyInit)
		var ii initItem
		if err == nil {
			ii, err = decodeInit(it)
		}
		if err == nil {
			switch {
			case ii.committed == token:
				cancel()
				return m.committedInit(token)
			case ii.lockToken != token || ii.committed != "":
				cancel()
				return lost(kinesisload.LostCommitRefused, "another host holds the initialisation lock or committed")
			}
			ii.committed = token
			// Whether the stream was identified is read, not guessed: a
			// commit without it lets a host joining after the identity
			// item was deleted take the stream for one never
			// identified (checkIdentityGone).
			var id Item
			if id, err = m.c.table.Get(cctx, m.stream, keyIdentity); err == nil {
				ii.identified = id.Exists()
				_, err = m.c.table.Put(cctx, ii.encode(m.part))
				if err == nil {
					cancel()
					return m.committedInit(token)
				}
			}
		}
		cancel()
		if fatal(err) && !errors.Is(err, ErrBadItem) {
			return fmt.Errorf("fleet: stream %s: committing the initialisation: %w", m.stream, err)
		}
		if errors.Is(err, ErrBadItem) {
			return err
		}
		// Refused or unknown: the read at the top tells.
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// committedInit records the commit of token and tells the other hosts.
func (m *member) committedInit(token string) error {
	m.mu.Lock()
	m.committed, m.fold = token, token
	m.needRead = true // the items to fold, as they are now
	m.mu.Unlock()
	m.changed()
	m.signal()
	return nil
}
