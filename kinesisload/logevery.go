package kinesisload

import (
	"log/slog"
	"sync"
	"time"
)

// logInterval is how often a [logEvery] logs an event that repeats.
const logInterval = time.Minute

// logEvery logs an event that may repeat for every record (a KPL record
// outside its shard's hash key range, one that cannot be decoded) at most
// once per interval: the first occurrence at once, then a line per
// interval with how many occurred since, so that a producer that does it
// for every record does not flood the log. The events are counted in
// [Stats] and reported to the hooks one by one all the same. The zero
// value is not usable: see newLogEvery.
type logEvery struct {
	log      *slog.Logger
	msg      string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	last    time.Time // when a line was last logged; zero: never
	records int       // records since that line
	events  int       // events since that line
}

func newLogEvery(log *slog.Logger, msg string, now func() time.Time) *logEvery {
	return &logEvery{log: log, msg: msg, interval: logInterval, now: now}
}

// add counts one event of records records and logs a line with args (the
// latest event's details) when none was logged within the interval.
func (e *logEvery) add(records int, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records += records
	e.events++
	now := e.now()
	if !e.last.IsZero() && now.Sub(e.last) < e.interval {
		return
	}
	args = append(args, "events", e.events, "records", e.records)
	if !e.last.IsZero() {
		args = append(args, "since", e.last)
	}
	e.log.Warn(e.msg, args...)
	e.last, e.records, e.events = now, 0, 0
}
