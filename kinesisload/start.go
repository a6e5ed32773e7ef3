package kinesisload

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// StartStore is an optional capability of a [PositionStore]: it keeps T0,
// the time on Kinesis's clock at which a stream's start-up began, from
// before its LATEST positions are resolved until they are saved. A start-up
// that dies in between (a crash, a kill, a failed batch) and runs again
// resolves at the first T0, so the records that arrived meanwhile are
// delivered. [JournalStore] implements it. With a PositionStore that does
// not, a start-up started over within the same Run keeps its T0 in
// memory, but each Run takes a new one, and records that arrived between a
// start-up that died before saving its batch and the next one are taken
// for "before the start".
//
// A StartStore's StartOver leaves [StartOverT0] of the new identity
// pending, in the same atomic write (see there).
//
// Implementations must be safe for concurrent use.
type StartStore interface {
	// LoadStart returns the pending T0 of stream; ok is false when none
	// is pending.
	LoadStart(ctx context.Context, stream string) (t0 time.Time, ok bool, err error)
	// SaveStart durably records t0 as stream's pending T0, unless one is
	// pending already, and returns the T0 in force (the first one saved).
	SaveStart(ctx context.Context, stream string, t0 time.Time) (time.Time, error)
	// ClearStart durably forgets stream's pending T0, once the positions
	// resolved at it are saved. Clearing when none is pending does
	// nothing.
	ClearStart(ctx context.Context, stream string) error
}

var _ StartStore = (*JournalStore)(nil)

// StartOverT0 is the T0 of a stream adopted by a start-over
// ([StreamRecreatedStartOver]): its creation time less
// [scan.HostClockBound]. The stream was created after the first Run's T0
// (the old stream, whose identity that Run stored, stood then), so every
// record of it arrived after the start, and LATEST resolved at StartOverT0
// means its beginning; a fixed start ([Config.StartPosition]
// TRIM_HORIZON or AT_TIMESTAMP) means what it says on it. The margin keeps
// a record stamped by a clock a little behind the one that stamped the
// stream's creation after T0 all the same.
//
// A [StartStore] leaves StartOverT0(id) pending when StartOver(id) starts
// the stream over, in the same atomic write, so that a start-up that dies
// at any point after the start-over resolves at it too.
func StartOverT0(id StreamIdentity) time.Time {
	return id.Created.Add(-scan.HostClockBound).UTC().Truncate(time.Millisecond)
}

// LoadStart implements [StartStore].
func (s *JournalStore) LoadStart(ctx context.Context, stream string) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.starts[stream]
	return t, ok, nil
}

// SaveStart implements [StartStore]: one journal record.
func (s *JournalStore) SaveStart(ctx context.Context, stream string, t0 time.Time) (time.Time, error) {
	if t, ok, err := s.LoadStart(ctx, stream); err != nil || ok {
		return t, err
	}
	t0 = t0.UTC()
	s.mu.Lock()
	rec := storeRecord{Stream: stream, T0: &t0, Gen: s.gen(stream)}
	s.mu.Unlock()
	if err := s.write(ctx, stream, rec); err != nil {
		return time.Time{}, err
	}
	t, _, err := s.LoadStart(ctx, stream)
	return t, err
}

// ClearStart implements [StartStore]: one journal record, if a T0 is
// pending.
func (s *JournalStore) ClearStart(ctx context.Context, stream string) error {
	if _, ok, err := s.LoadStart(ctx, stream); err != nil || !ok {
		return err
	}
	s.mu.Lock()
	rec := storeRecord{Stream: stream, T0Done: true, Gen: s.gen(stream)}
	s.mu.Unlock()
	return s.write(ctx, stream, rec)
}
