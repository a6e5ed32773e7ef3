package kinesisload

import (
	"fmt"
)

// This file holds why a lease came, went or was given up, and what the
// Loader tells its hooks and [Loader.Stats] about it: the hook first, so
// that Stats never shows an event whose hook has not been called.

// AcquireReason says why a [Lease] was granted to this host: what the
// shard's lease was before. Its String (and MarshalText) is a short
// lower-case name, stable for metric attributes.
type AcquireReason uint8

// The reasons a lease is granted.
const (
	// AcquireUnknown: the coordinator does not say.
	AcquireUnknown AcquireReason = iota
	// AcquireInitial: the shard never had an owner in the fleet (its
	// first lease), or the default coordinator (one process, no owners).
	AcquireInitial
	// AcquireUnowned: the shard's last owner released it (a Close, a
	// completed scale-in) and nobody held it.
	AcquireUnowned
	// AcquireExpired: the shard's owner stopped heartbeating for the
	// lease duration (it died or was cut off): an unplanned move, after
	// which the batch that owner had in flight may be delivered again.
	AcquireExpired
	// AcquireHandoff: the shard's owner handed it over at this host's
	// request (a rebalance: a steal), after committing its batch in
	// flight, so nothing is delivered twice.
	AcquireHandoff
	// AcquireReclaimed: the shared table still named this host as the
	// owner, from an earlier session that did not release the lease.
	AcquireReclaimed
)

var acquireNames = [...]string{"unknown", "initial", "unowned", "expired", "handoff", "reclaimed"}

// String returns the reason's name, as logs and JSON show it.
func (r AcquireReason) String() string { return reasonName(acquireNames[:], uint8(r), "AcquireReason") }

// MarshalText implements [encoding.TextMarshaler]: the name of
// [AcquireReason.String].
func (r AcquireReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// LostReason says why a [Lease] was lost: it is the Why of the
// [*LeaseLostError] that [Lease.Err] returns. Its String is a short
// lower-case name, stable for metric attributes.
type LostReason uint8

// The reasons a lease is lost.
const (
	// LostUnknown: the coordinator does not say.
	LostUnknown LostReason = iota
	// LostCommitRefused: a Commit was refused because the shard's owner
	// or epoch is no longer the lease's: another host took the shard
	// (it saw this host dead), and the fence held.
	LostCommitRefused
	// LostSelfFenced: this host could not renew (its heartbeat did not
	// land) for long enough, and stopped before its lease could expire
	// in any other host's view.
	LostSelfFenced
	// LostExpired: the shared table names another owner or epoch: the
	// lease expired in the other hosts' view (this host was paused or
	// cut off) and one of them took the shard.
	LostExpired
	// LostReleased: this host released the lease (Release, or Leave at
	// the end of a session). The Loader reports it as a handoff, not a
	// loss.
	LostReleased
	// LostStartedOver: the fleet started over on a stream re-created
	// under the name ([StreamRecreatedStartOver]): the lease belongs to
	// the old stream's generation of the shared progress, which is void.
	LostStartedOver
	// LostSinkFenced: the [TransactionalSink] refused a batch with an
	// error wrapping [ErrLeaseLost]: it stored the shard under a newer
	// epoch than the batch's (another host took the shard while this one
	// was delivering), and stored nothing of the batch. The Loader, not
	// the coordinator, reports it: the coordinator may not have seen the
	// loss yet.
	LostSinkFenced
)

var lostNames = [...]string{"unknown", "commit_refused", "self_fenced", "expired", "released", "started_over", "sink_fenced"}

// String returns the reason's name, as logs and JSON show it.
func (r LostReason) String() string { return reasonName(lostNames[:], uint8(r), "LostReason") }

// MarshalText implements [encoding.TextMarshaler]: the name of
// [LostReason.String].
func (r LostReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// HandoffReason says why this host gave a lease up on a planned move:
// it stopped reading the shard, let the batch in flight finish and commit,
// then released the lease. Its String is a short lower-case name.
type HandoffReason uint8

// The reasons a lease is handed off.
const (
	// HandoffUnknown is not used by the Loader.
	HandoffUnknown HandoffReason = iota
	// HandoffRebalance: another host asked for the shard
	// ([Lease.Handoff]): the fleet rebalances after a host joined.
	HandoffRebalance
	// HandoffClose: [Loader.Close]: the host leaves the fleet (a
	// scale-in, a deploy); its shards are free at once.
	HandoffClose
	// HandoffPause: [Loader.Pause].
	HandoffPause
	// HandoffStop: Run stopped otherwise: its context ended (a hard stop:
	// the batch in flight was cancelled, not committed, and will be
	// delivered again) or Run stops with an error.
	HandoffStop
)

var handoffNames = [...]string{"unknown", "rebalance", "close", "pause", "stop"}

// String returns the reason's name, as logs and JSON show it.
func (r HandoffReason) String() string { return reasonName(handoffNames[:], uint8(r), "HandoffReason") }

// MarshalText implements [encoding.TextMarshaler]: the name of
// [HandoffReason.String].
func (r HandoffReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func reasonName(names []string, r uint8, typ string) string {
	if int(r) >= len(names) {
		return fmt.Sprintf("%s(%d)", typ, r)
	}
	return names[r]
}
