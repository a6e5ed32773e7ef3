package kinesisload

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// This file is what fleet coordinators share to balance by throughput
// ([BalanceByThroughput]): the Loader feeds every lease the bytes it
// delivers ([LoadObserver]), the lease's owner smooths them into a rate
// ([RateMeter]) that it publishes on a write it makes anyway (its host
// heartbeat), and every host picks its steal with [PickSteal].

// BalanceBy says what a fleet coordinator balances between hosts. The
// zero value is [BalanceByCount].
type BalanceBy int

const (
	// BalanceByCount gives every host within one shard of its fair share
	// of the leasable shards, ceil(shards/live hosts). The default.
	BalanceByCount BalanceBy = iota
	// BalanceByThroughput balances the sum of the shards' recent rates
	// (bytes/s, as published by their owners; a shard under [RateFloor]
	// counts RateFloor, so that idle shards still spread by count). Free
	// shards are still taken first, by count; then a host steals by the
	// rule of [PickSteal].
	BalanceByThroughput
)

// String returns "count" or "throughput".
func (b BalanceBy) String() string {
	switch b {
	case BalanceByCount:
		return "count"
	case BalanceByThroughput:
		return "throughput"
	}
	return fmt.Sprintf("BalanceBy(%d)", int(b))
}

// Validate returns an error naming field when b is not a known value.
func (b BalanceBy) Validate(field string) error {
	if b != BalanceByCount && b != BalanceByThroughput {
		return fmt.Errorf("%s = %d: must be BalanceByCount or BalanceByThroughput", field, int(b))
	}
	return nil
}

// LoadObserver is an optional interface of a [Lease]: when a lease
// implements it, the Loader calls Observe with the bytes of every batch
// the Sink accepted from the lease's shard (data plus partition keys, as
// Kinesis counts them, and as [BatchDelivered].Bytes), so that a
// coordinator that balances by throughput learns the shard's rate without
// a write of its own. Observe must be cheap and must not block; it may be
// called after the lease was lost or released (it is then ignored).
type LoadObserver interface {
	Observe(bytes int64)
}

// RateFloor is the rate, in bytes/s, that a shard counts at least when a
// coordinator balances by throughput: 1 KiB/s.
const RateFloor = 1024.0

// RateWindow is the time constant of [RateMeter]'s moving average.
const RateWindow = time.Minute

// RateMeter smooths bytes observed into a rate in bytes/s: an exponentially
// weighted moving average with time constant [RateWindow], updated by
// Tick. It is safe for concurrent use; the zero value is ready.
type RateMeter struct {
	mu      sync.Mutex
	pending int64
	rate    float64
	last    time.Time
}

// Observe adds bytes to the next Tick. It implements [LoadObserver].
func (r *RateMeter) Observe(bytes int64) {
	r.mu.Lock()
	r.pending += bytes
	r.mu.Unlock()
}

// Tick folds the bytes observed since the last Tick into the rate, over
// the time since then on the caller's clock (now), and returns the rate.
// The first Tick only starts the clock.
func (r *RateMeter) Tick(now time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.IsZero() || !now.After(r.last) {
		if r.last.IsZero() {
			r.last = now
		}
		return r.rate
	}
	dt := now.Sub(r.last)
	inst := float64(r.pending) / dt.Seconds()
	alpha := 1 - math.Exp(-dt.Seconds()/RateWindow.Seconds())
	r.rate += alpha * (inst - r.rate)
	r.pending, r.last = 0, now
	return r.rate
}

// Rate returns the rate as of the last Tick (or Seed).
func (r *RateMeter) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// Seed sets the rate, for a shard whose lease moved: its new owner starts
// from the rate its previous owner published, not from zero, so that a
// move does not make the shard look idle for a minute (which would invite
// another move).
func (r *RateMeter) Seed(rate float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rate = rate
}

// Weight is the load a shard of rate bytes/s counts when balancing by
// throughput: at least [RateFloor].
func Weight(rate float64) float64 { return math.Max(rate, RateFloor) }

// PickSteal is the steal rule of [BalanceByThroughput]. mine is the load
// (sum of [Weight]s) of the host that would steal, theirs the load of the
// most loaded live host, and shards the weights of that host's shards that
// may be stolen. It returns the shard whose move leaves the two hosts'
// loads closest, among those whose move reduces their spread by at least
// RateFloor: a shard of weight w qualifies when w + RateFloor <= theirs -
// mine (the new spread is |theirs-mine-2w| < theirs-mine). It returns ""
// when none does.
//
// Every steal so chosen lowers the sum of the squares of the hosts' loads
// by at least 2*RateFloor*w, so with steady rates the fleet stops moving
// shards after a finite number of steals and never moves one back; the
// RateFloor margin keeps rates that wobble from swapping a shard to and
// fro. With every shard at the floor the rule is the count rule: steal
// when the other host holds at least two more shards.
func PickSteal(mine, theirs float64, shards map[string]float64) string {
	return PickStealWithin(mine, theirs, shards, RateFloor)
}

// PickStealWithin is [PickSteal] with a margin of its own instead of
// RateFloor: a shard of weight w qualifies when w + margin <= theirs -
// mine. The fleet's coordinator (kinesisload/fleet) takes a margin that
// grows with the heaviest shard of either host: the minute's average of a
// busy shard's rate wobbles by more than RateFloor, and the idle shards
// beside two busy ones would otherwise be handed to and fro. A margin
// below RateFloor counts as RateFloor.
func PickStealWithin(mine, theirs float64, shards map[string]float64, margin float64) string {
	margin = math.Max(margin, RateFloor)
	spread := theirs - mine
	best, bestAfter := "", math.Inf(1)
	for id, w := range shards {
		if w+margin > spread {
			continue
		}
		after := math.Abs(spread - 2*w)
		if after < bestAfter || (after == bestAfter && id < best) {
			best, bestAfter = id, after
		}
	}
	return best
}

// observers maps a shard to the lease of this Loader that observes its
// bytes ([LoadObserver]); fed by hooks.onDelivered.
type observers struct {
	mu sync.Mutex
	m  map[string]Lease
}

func (o *observers) add(ls Lease) {
	if _, ok := ls.(LoadObserver); !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]Lease{}
	}
	o.m[ls.Shard()] = ls
}

func (o *observers) remove(ls Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m[ls.Shard()] == ls {
		delete(o.m, ls.Shard())
	}
}

func (o *observers) observe(shard string, bytes int64) {
	o.mu.Lock()
	ls := o.m[shard]
	o.mu.Unlock()
	if ob, ok := ls.(LoadObserver); ok {
		ob.Observe(bytes)
	}
}
