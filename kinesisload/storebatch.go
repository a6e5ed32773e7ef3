package kinesisload

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/tidemark/tidemark/journal"
)

// A Save larger than one journal record (the file journal's default
// MaxRecordSize is 4 MiB, which the start-up batch of about 15,000 shards
// exceeds) is written as a batch:
//
//	{"stream":"orders","updates":[...],"batch":"9f2c...","part":1}
//	{"stream":"orders","updates":[...],"batch":"9f2c...","part":2}
//	{"stream":"orders","commit":"9f2c...","parts":2}
//
// (The commit of a Save to a stream that was started over carries its
// generation, "gen", for all its parts; see storeRecord.)
//
// Replay applies the parts of a batch only when it reaches the commit that
// names the batch and its number of parts; the parts of a batch never
// committed (a crash, a cancelled or failed Save) are ignored, and dropped
// by the next snapshot. A Save small enough for one record is written as
// before, one record with no batch fields, so journals written before
// batches existed replay unchanged.

// defaultPartBytes is the largest part a JournalStore writes: a quarter of
// the file journal's default MaxRecordSize. A journal that refuses a part
// as too large (a smaller MaxRecordSize) gets smaller parts.
const defaultPartBytes = 1 << 20

// partOverhead bounds the bytes of a part record around its updates: the
// stream name (quoted), the field names, the batch ID and the part number.
const partOverhead = 128

// appendRecord appends rec as one record when its encoding fits in limit
// bytes, else as a batch of parts of at most limit bytes and a commit. It
// returns the index of every record it appended, including parts of an
// attempt that the journal refused as too large (they are durable and
// never committed, so applying them is doing nothing). A part refused as
// too large makes it split again, into halves.
func (s *JournalStore) appendRecord(ctx context.Context, rec storeRecord, limit int) ([]uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if len(data) <= limit || len(rec.Updates) <= 1 {
		idx, err := s.j.Append(ctx, data)
		if err == nil {
			return []uint64{idx}, nil
		}
		if !errors.Is(err, journal.ErrTooLarge) || len(rec.Updates) <= 1 {
			return nil, err
		}
		// Nothing of the call was appended: split it.
		limit = len(data) / 2
	}
	encoded := make([][]byte, len(rec.Updates))
	for i, u := range rec.Updates {
		if encoded[i], err = json.Marshal(u); err != nil {
			return nil, err
		}
	}
	stream, err := json.Marshal(rec.Stream)
	if err != nil {
		return nil, err
	}
	var indexes []uint64
	for {
		id, err := newBatchID()
		if err != nil {
			return indexes, err
		}
		parts := splitParts(encoded, limit-partOverhead-len(stream))
		tooLarge := false
		for i, part := range parts {
			idx, err := s.j.Append(ctx, partRecord(stream, id, i+1, part))
			if errors.Is(err, journal.ErrTooLarge) && len(part) > 1 && limit > 1 {
				tooLarge = true
				break
			}
			if err != nil {
				return indexes, fmt.Errorf("part %d of %d of batch %s: %w", i+1, len(parts), id, err)
			}
			indexes = append(indexes, idx)
		}
		if tooLarge {
			limit /= 2
			continue
		}
		commit, err := json.Marshal(storeRecord{Stream: rec.Stream, Commit: id, Parts: len(parts), Gen: rec.Gen})
		if err != nil {
			return indexes, err
		}
		idx, err := s.j.Append(ctx, commit)
		if err != nil {
			return indexes, fmt.Errorf("commit of batch %s (%d parts): %w", id, len(parts), err)
		}
		return append(indexes, idx), nil
	}
}

// splitParts groups encoded updates, in order, into parts whose updates
// together take at most room bytes; an update larger than room is a part
// of its own.
func splitParts(encoded [][]byte, room int) [][][]byte {
	var parts [][][]byte
	var cur [][]byte
	size := 0
	for _, e := range encoded {
		if len(cur) > 0 && size+1+len(e) > room {
			parts = append(parts, cur)
			cur, size = nil, 0
		}
		cur = append(cur, e)
		size += 1 + len(e) // and a comma
	}
	if len(cur) > 0 {
		parts = append(parts, cur)
	}
	return parts
}

// partRecord encodes part n of batch id, as storeRecord would.
func partRecord(stream []byte, id string, n int, updates [][]byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"stream":`)
	b.Write(stream)
	b.WriteString(`,"updates":[`)
	b.Write(bytes.Join(updates, []byte{','}))
	fmt.Fprintf(&b, `],"batch":%q,"part":%d}`, id, n)
	return b.Bytes()
}

// newBatchID returns a random batch name: 16 hexadecimal digits.
func newBatchID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a batch ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// replayRecord applies one replayed record: a whole Save or a prune at
// once, a part when its commit comes, a commit with its parts. A commit
// whose parts are not all there is corruption: the parts are appended, and
// acknowledged, before the commit is written.
func (s *JournalStore) replayRecord(index uint64, rec storeRecord, parts map[string][]storeRecord) error {
	if rec.Gen < 0 {
		return fmt.Errorf("%w: record %d: generation %d of stream %s", ErrStoreCorrupt, index, rec.Gen, rec.Stream)
	}
	switch {
	case rec.Batch != "":
		if rec.Part < 1 {
			return fmt.Errorf("%w: record %d: part %d of batch %s", ErrStoreCorrupt, index, rec.Part, rec.Batch)
		}
		parts[rec.Batch] = append(parts[rec.Batch], rec)
	case rec.Commit != "":
		got := parts[rec.Commit]
		delete(parts, rec.Commit)
		slices.SortFunc(got, func(a, b storeRecord) int { return a.Part - b.Part })
		for i, p := range got {
			if p.Part != i+1 || p.Stream != rec.Stream {
				got = nil // not parts 1..n of this stream
				break
			}
		}
		if len(got) != rec.Parts {
			return fmt.Errorf("%w: record %d commits batch %s of %d parts for stream %s, but parts 1 to %d are not all before it",
				ErrStoreCorrupt, index, rec.Commit, rec.Parts, rec.Stream, rec.Parts)
		}
		for _, p := range got {
			p.Gen = rec.Gen // a part's generation is its commit's
			s.apply(p)
		}
	default:
		s.apply(rec)
	}
	return nil
}
