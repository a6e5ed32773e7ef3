package kinesisload

import (
	"context"
	"errors"
	"fmt"
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

// keepStart makes t0 the pending T0 of the stream, unless one is pending
// already (the store's, or this Run's in memory): durably when the store
// is a [StartStore] (the first run's first write), in memory otherwise.
func (s *session) keepStart(ctx context.Context, t0 time.Time) error {
	stream := s.l.cfg.Stream
	ss, durable := s.store.(StartStore)
	if !durable {
		if s.t0.IsZero() {
			s.t0 = t0
		}
		return nil
	}
	got, err := ss.SaveStart(ctx, stream, t0)
	if err != nil {
		return stopError(stream, "", "SaveStart", ErrJournal, fmt.Errorf("saving the start time: %w", err))
	}
	s.t0 = got
	s.l.log.Info("start time", "t0", got, "journaled", true)
	return nil
}

// startTime returns the T0 of this start-up: the pending one, if the store
// kept one (the first run's, saved with the stream's identity), or the one
// an earlier attempt of this Run took, or else Kinesis's clock when this
// Run began (s.began, by this host's monotonic clock: a later start-up
// with shards to resolve, such as a widened selection, or a fleet's whose
// init item, which held T0, was deleted by hand), journaled before it is
// used. The Run's start, not this start-up's: a start-up may begin long
// after the Run (a host that waited for a fleet's initialisation lock), and
// the records that arrived in between must not be taken for "before the
// start".
func (s *session) startTime(ctx context.Context) (time.Time, error) {
	began := s.began
	stream := s.l.cfg.Stream
	ss, durable := s.store.(StartStore)
	if durable {
		t0, ok, err := ss.LoadStart(ctx, stream)
		if err != nil {
			return time.Time{}, stopError(stream, "", "LoadStart", ErrJournal, fmt.Errorf("loading the start time: %w", err))
		}
		if ok {
			if !t0.Equal(s.t0) {
				s.l.log.Info("resolving LATEST at the start time of an earlier start-up", "t0", t0)
			}
			s.t0 = t0
			return t0, nil
		}
	}
	if !s.t0.IsZero() {
		// An earlier attempt of this start-up took T0 (and failed): a
		// retried batch resolves at the same T0, also when the store
		// cannot keep it.
		return s.t0, nil
	}
	now, err := s.resolver.Now(ctx, s.client, stream)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return time.Time{}, err
		}
		return time.Time{}, stopError(stream, "", "ListShards", ErrKinesis, fmt.Errorf("initialisation: reading Kinesis's clock: %w", err))
	}
	t0 := now.Add(-time.Since(began)).Truncate(time.Millisecond)
	if durable {
		if t0, err = ss.SaveStart(ctx, stream, t0); err != nil {
			return time.Time{}, stopError(stream, "", "SaveStart", ErrJournal, fmt.Errorf("saving the start time: %w", err))
		}
	}
	s.t0 = t0
	s.l.log.Info("start time", "t0", t0, "journaled", durable)
	return t0, nil
}

// clearStart forgets a pending T0 once nothing is left to resolve at it.
func (s *session) clearStart(ctx context.Context) error {
	s.t0 = time.Time{}
	ss, ok := s.store.(StartStore)
	if !ok {
		return nil
	}
	if err := ss.ClearStart(ctx, s.l.cfg.Stream); err != nil {
		return stopError(s.l.cfg.Stream, "", "ClearStart", ErrJournal, fmt.Errorf("clearing the start time: %w", err))
	}
	return nil
}
