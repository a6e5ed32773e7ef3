// Package waitlock is a mutex for critical sections that wait: a lock held
// across a call to a table, a journal or a timer.
//
// Its waiters block on a channel, so a [testing/synctest] bubble sees them
// durably blocked and moves its clock on while the holder waits for a
// timer: with a sync.Mutex a waiter is not durably blocked, and a bubble
// whose only runnable work is the holder's timer stands still for ever. A
// waiter can also give up when its context ends ([Mutex.LockContext]).
package waitlock

import (
	"context"
	"sync"
)

// Mutex is a mutual exclusion lock whose waiters block on a channel. The
// zero value is an unlocked Mutex. A Mutex must not be copied after first
// use.
type Mutex struct {
	once sync.Once
	ch   chan struct{} // holds a value while the Mutex is locked
}

func (m *Mutex) init() { m.once.Do(func() { m.ch = make(chan struct{}, 1) }) }

// Lock locks m, waiting until it is unlocked.
func (m *Mutex) Lock() {
	m.init()
	m.ch <- struct{}{}
}

// LockContext locks m, or returns ctx.Err() if ctx ends first (m is then
// not locked).
func (m *Mutex) LockContext(ctx context.Context) error {
	m.init()
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock unlocks m. Unlocking an unlocked Mutex is a run-time error, as
// with sync.Mutex.
func (m *Mutex) Unlock() {
	m.init()
	select {
	case <-m.ch:
	default:
		panic("waitlock: Unlock of an unlocked Mutex")
	}
}
