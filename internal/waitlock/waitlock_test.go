package waitlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestLockExcludes(t *testing.T) {
	var m Mutex
	var wg sync.WaitGroup
	n := 0
	for range 50 {
		wg.Go(func() {
			for range 100 {
				m.Lock()
				n++
				m.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 5000 {
		t.Fatalf("n = %d, want 5000: the lock let two holders in", n)
	}
}

// A waiter is durably blocked: a bubble's clock moves on while the holder
// sleeps (with sync.Mutex the bubble would stand still for ever).
func TestWaiterLetsABubbleClockMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Mutex
		start := time.Now()
		m.Lock()
		done := make(chan time.Time)
		go func() {
			m.Lock()
			done <- time.Now()
			m.Unlock()
		}()
		time.Sleep(time.Hour)
		m.Unlock()
		if got := (<-done).Sub(start); got != time.Hour {
			t.Fatalf("the waiter got the lock after %v, want 1h", got)
		}
	})
}

func TestLockContextGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Mutex
		m.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := m.LockContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("LockContext of a held lock = %v, want DeadlineExceeded", err)
		}
		m.Unlock()
		if err := m.LockContext(context.Background()); err != nil {
			t.Fatalf("LockContext of a free lock = %v", err)
		}
		m.Unlock()
	})
}

func TestUnlockOfUnlockedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an unlocked Mutex did not panic")
		}
	}()
	var m Mutex
	m.Unlock()
}
