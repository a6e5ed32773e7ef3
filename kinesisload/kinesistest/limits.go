package kinesistest

import (
	"time"
)

// bucket is a token bucket on the fake's clock. It starts full; its level
// may go below zero when a call takes more than was left (a large read),
// and the next calls wait until it is positive again.
type bucket struct {
	level float64
	last  time.Time
	init  bool
}

// refill adds rate tokens per second elapsed since the last refill, up to
// rate (one second's worth).
func (b *bucket) refill(now time.Time, rate float64) {
	if !b.init {
		b.level, b.last, b.init = rate, now, true
		return
	}
	if d := now.Sub(b.last); d > 0 {
		b.level += rate * d.Seconds()
		if b.level > rate {
			b.level = rate
		}
		b.last = now
	}
}

// allowRead reports whether shard s may serve a GetRecords call now, and if
// so records the call. Bytes are charged afterwards with chargeRead.
func (f *Fake) allowRead(s *shard, now time.Time) bool {
	l := f.cfg.limits
	if n := l.GetRecordsPerSecond; n > 0 {
		s.readCalls = lastSecond(s.readCalls, now)
		if len(s.readCalls) >= n {
			return false
		}
	}
	if r := l.ReadBytesPerSecond; r > 0 {
		s.readBytes.refill(now, float64(r))
		if s.readBytes.level <= 0 {
			return false
		}
	}
	if l.GetRecordsPerSecond > 0 {
		s.readCalls = append(s.readCalls, now)
	}
	return true
}

// allowIterator reports whether shard s may issue an iterator now, and if
// so records the call.
func (f *Fake) allowIterator(s *shard, now time.Time) bool {
	n := f.cfg.limits.GetShardIteratorPerSecond
	if n <= 0 {
		return true
	}
	s.iterCalls = lastSecond(s.iterCalls, now)
	if len(s.iterCalls) >= n {
		return false
	}
	s.iterCalls = append(s.iterCalls, now)
	return true
}

// lastSecond keeps the call times of the second before now.
func lastSecond(calls []time.Time, now time.Time) []time.Time {
	keep := calls[:0]
	for _, t := range calls {
		if now.Sub(t) < time.Second {
			keep = append(keep, t)
		}
	}
	return keep
}

func (f *Fake) chargeRead(s *shard, n int) {
	if f.cfg.limits.ReadBytesPerSecond > 0 {
		s.readBytes.level -= float64(n)
	}
}

// allowWrite reports whether shard s may take a record of size bytes now,
// and if so charges it.
func (f *Fake) allowWrite(s *shard, size int, now time.Time) bool {
	l := f.cfg.limits
	if r := l.WriteRecordsPerSecond; r > 0 {
		s.writeRecs.refill(now, float64(r))
		if s.writeRecs.level < 1 {
			return false
		}
	}
	if r := l.WriteBytesPerSecond; r > 0 {
		s.writeBytes.refill(now, float64(r))
		if s.writeBytes.level < float64(size) {
			return false
		}
	}
	if l.WriteRecordsPerSecond > 0 {
		s.writeRecs.level--
	}
	if l.WriteBytesPerSecond > 0 {
		s.writeBytes.level -= float64(size)
	}
	return true
}
