package journal

import (
	"context"
	"fmt"
	"sync"
)

// Memory is an in-memory [Journal] for tests. It keeps the same contract
// as the file journal, including the maximum record size
// ([DefaultMaxRecordSize]), except that nothing survives the process:
// "durable" means "kept until Close". A zero Memory is not valid; use
// [NewMemory].
type Memory struct {
	mu       sync.Mutex
	closed   bool
	snap     []byte
	hasSnap  bool
	snapIdx  uint64
	recs     [][]byte // recs[i] has index snapIdx+1+i
	last     uint64
	maxBytes int
}

var _ Journal = (*Memory)(nil)

// NewMemory returns an empty in-memory journal, for tests.
func NewMemory() *Memory {
	return &Memory{maxBytes: DefaultMaxRecordSize}
}

// Append implements [Journal.Append].
func (m *Memory) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for i, r := range recs {
		if len(r) > m.maxBytes {
			return 0, fmt.Errorf("%w: record %d of the call is %d bytes, the maximum is %d", ErrTooLarge, i, len(r), m.maxBytes)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	for _, r := range recs {
		m.recs = append(m.recs, append([]byte{}, r...))
		m.last++
	}
	return m.last, nil
}

// Replay implements [Journal.Replay].
func (m *Memory) Replay(ctx context.Context, fn func(Entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	hasSnap, snapIdx, snap := m.hasSnap, m.snapIdx, m.snap
	recs := m.recs[:len(m.recs):len(m.recs)]
	m.mu.Unlock()

	if hasSnap {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(Entry{Index: snapIdx, Snapshot: true, Data: append([]byte{}, snap...)}); err != nil {
			return err
		}
	}
	for i, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(Entry{Index: snapIdx + 1 + uint64(i), Data: append([]byte{}, r...)}); err != nil {
			return err
		}
	}
	return nil
}

// Snapshot implements [Journal.Snapshot].
func (m *Memory) Snapshot(ctx context.Context, index uint64, state []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if index < m.snapIdx || index > m.last {
		return fmt.Errorf("%w: index %d, want %d to %d", ErrSnapshotIndex, index, m.snapIdx, m.last)
	}
	drop := index - m.snapIdx
	m.recs = append([][]byte{}, m.recs[drop:]...)
	m.snap, m.hasSnap, m.snapIdx = append([]byte{}, state...), true, index
	return nil
}

// Close implements [Journal.Close].
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	m.recs, m.snap = nil, nil
	return nil
}
