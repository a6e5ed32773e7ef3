package fleet

import "errors"

// Errors of a [Table]. Every error a Table returns is one of three kinds:
// it wraps [ErrConflict] (the condition failed: nothing changed), it wraps
// [ErrUnknown] (a transient failure: a write may or may not have landed, a
// read read nothing), or it is fatal: no retry fixes it (access denied, a
// missing table, an item that cannot be decoded), and the protocol stops
// the session with it.
var (
	// ErrConflict is wrapped by the error of a conditional write whose
	// condition failed: the item's version (or the entry's value) was
	// not the one given. Nothing changed.
	ErrConflict = errors.New("fleet: condition failed")
	// ErrUnknown is wrapped by the error of a call that failed
	// transiently (a timeout, throttling, a 5xx, a lost connection): a
	// write may or may not have landed, and is read back.
	ErrUnknown = errors.New("fleet: outcome unknown")
)

// Errors of the protocol and of the tables this package provides.
var (
	// ErrBadItem is wrapped by the error for an item of the table that cannot
	// be decoded (edited by hand, or written by an incompatible version): no
	// retry fixes it, so the session stops with it (naming the item and the
	// attribute) instead of retrying for ever.
	ErrBadItem = errors.New("fleet: an item of the table cannot be decoded")
	// ErrIdentityMissing is wrapped by the error of a Join that finds no
	// identity item while the table shows the stream was initialised (its
	// first generation's initialisation committed, or a later generation
	// exists): the item was deleted by hand. Taking its absence for a new
	// stream would make the host read the archive of a stream that no longer
	// exists beside hosts of the generation in force, or take a stream
	// re-created meanwhile for the one the progress was stored for.
	ErrIdentityMissing = errors.New("fleet: the stream's identity item is missing, but the stream was initialised")
	// ErrIdentityBehind stops the session of a host whose generation is
	// later than the one the identity item names: the item went back (it
	// was restored from a backup taken before the fleet started over),
	// and the hosts of the generation in force would read on beside a
	// fleet that no longer knows it.
	ErrIdentityBehind = errors.New("fleet: the stream's identity item names a generation before the fleet's")
	// ErrDown is wrapped (with [ErrUnknown]) by every call of a [FaultyTable]
	// after [FaultyTable.Kill]: the process is gone, and nothing it sends
	// lands.
	ErrDown = errors.New("fleet: host is down")
	// ErrNotAnnounced is wrapped by the error [Rewind] returns when the
	// rewind is stored but its announcement could not be written: the
	// hosts then see it within their ResyncInterval rather than at their
	// next round.
	ErrNotAnnounced = errors.New("fleet: the rewind is stored but was not announced to the hosts")
	// ErrNotEmpty is wrapped by the error of an [Import] into a table
	// that already holds the stream's progress, or whose hosts started on
	// it.
	ErrNotEmpty = errors.New("fleet: the table already holds the stream")
)

// errGenMoved says a Join read the identity item just before another host
// started the fleet over: Join reads it again.
var errGenMoved = errors.New("fleet: the generation moved during Join")

// errIdentityAppeared says a Join found no identity item, then an
// initialisation committed with one, then the item: written between its
// two reads. The Join reads it again.
var errIdentityAppeared = errors.New("fleet: the identity item appeared during Join")

// errGaveUp says a conditional update of a shard item failed
// transiently (lost answers, conflicts, an outage) at every one of its
// attempts.
var errGaveUp = errors.New("gave up")
