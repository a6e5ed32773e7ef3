package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Deaggregate returns the user records of the aggregated record data, in
// order: the i-th has index (sub-sequence number) i. Their Data aliases
// data. It returns [ErrNotAggregated] for data without [Magic], and an
// error wrapping [ErrCorrupt] for data that fails a check.
//
// To de-aggregate many records, use a [Decoder]: it does not allocate per
// user record.
func Deaggregate(data []byte) ([]UserRecord, error) {
	var d Decoder
	if err := d.Decode(data); err != nil {
		return nil, err
	}
	out := make([]UserRecord, d.Len())
	for i := range out {
		out[i] = d.Record(i)
	}
	return out, nil
}

// A Decoder de-aggregates records one after the other, reusing its memory:
// per aggregated record it allocates one string (its keys, which the user
// records' keys are slices of), and nothing per user record. The zero
// Decoder is ready to use. A Decoder is not safe for concurrent use.
type Decoder struct {
	// The current aggregate: its key tables, raw (aliasing its bytes)
	// and as strings, and its user records.
	pkRaw, ehkRaw [][]byte
	pks, ehks     []string
	recs          []userRecord

	// The hash keys of the partition key table, then of the explicit
	// hash key table, computed by the first call to HashKey.
	hashed bool
	hashes []tableHash
}

// tableHash is the hash key of one table entry; ok false for an explicit
// hash key that does not parse.
type tableHash struct {
	k  HashKey
	ok bool
}

// userRecord is one decoded Record message, its indexes not yet checked
// while the Decoder reads the aggregate (the tables may come after the
// records), checked when Decode returns nil.
type userRecord struct {
	data    []byte // capacity cut to length
	pk, ehk uint64
	hasEHK  bool
	// slot is the index in Decoder.hashes of the key that gives its
	// hash key: pk, or the explicit hash key table's entry ehk.
	slot int
}

// Decode decodes the aggregated record data and checks all of it (MD5,
// protobuf wire format, required fields, table indexes) before it
// returns. On success d holds its user records until the next call to
// Decode: [Decoder.Len] of them, read with [Decoder.Record] and
// [Decoder.HashKey]. On failure d holds none; the error is
// [ErrNotAggregated] for data without [Magic], else it wraps
// [ErrCorrupt].
//
// d keeps data, which the user records' Data aliases: do not modify it
// while they are in use.
func (d *Decoder) Decode(data []byte) error {
	err := d.decode(data)
	if err != nil {
		d.recs = d.recs[:0]
	}
	return err
}

// Len returns the number of user records of the aggregate last decoded:
// 0 if Decode failed.
func (d *Decoder) Len() int { return len(d.recs) }

// Record returns user record i (its index, or sub-sequence number) of
// the aggregate last decoded; it panics if i is not in [0, Len()). Its
// Data aliases the data decoded, its capacity cut to its length (so that
// an append copies); its keys are slices of one string per aggregate.
func (d *Decoder) Record(i int) UserRecord {
	r := &d.recs[i]
	u := UserRecord{PartitionKey: d.pks[r.pk], Data: r.data}
	if r.hasEHK {
		u.ExplicitHashKey = d.ehks[r.ehk]
	}
	return u
}

// HashKey returns the hash key of user record i, as
// [UserRecord.HashKey] does: ok is false when its explicit hash key is
// not a decimal number in [0, 2^128-1], which includes an explicit hash
// key present but empty (Record returns "" for it, the same as none;
// KCL fails on it). Each key of the aggregate is hashed once, by the
// first call; it panics if i is not in [0, Len()).
func (d *Decoder) HashKey(i int) (k HashKey, ok bool) {
	if !d.hashed {
		d.hashTables()
	}
	// Small enough to be inlined into the caller's loop (go build
	// -gcflags=-m): the Loader calls it for every user record.
	h := d.hashes[d.recs[i].slot]
	return h.k, h.ok
}

func (d *Decoder) hashTables() {
	d.hashes = d.hashes[:0]
	for _, v := range d.pkRaw {
		d.hashes = append(d.hashes, tableHash{hashKeyOfMD5(md5.Sum(v)), true})
	}
	for _, s := range d.ehks {
		k, ok := parseHashKey(s)
		d.hashes = append(d.hashes, tableHash{k, ok})
	}
	d.hashed = true
}

func (d *Decoder) decode(b []byte) error {
	d.pkRaw, d.ehkRaw, d.recs = d.pkRaw[:0], d.ehkRaw[:0], d.recs[:0]
	d.pks, d.ehks = d.pks[:0], d.ehks[:0]
	d.hashed = false
	if !IsAggregated(b) {
		return ErrNotAggregated
	}
	if len(b) < len(Magic)+trailerSize {
		return corrupt("%d bytes, shorter than the magic bytes and the MD5", len(b))
	}
	body := b[len(Magic) : len(b)-trailerSize]
	if sum := md5.Sum(body); !bytes.Equal(sum[:], b[len(b)-trailerSize:]) {
		return corrupt("MD5 mismatch")
	}

	keyBytes := 0
	for m := body; len(m) > 0; {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return corrupt("AggregatedRecord at byte %d: %v", len(body)-len(m), protowire.ParseError(l))
		}
		at := len(body) - len(m)
		m = m[l:]
		switch num {
		case fieldPartitionKeyTable, fieldExplicitHashKeyTable, fieldRecords:
			if typ != protowire.BytesType {
				return corrupt("AggregatedRecord field %d at byte %d: wire type %d, want bytes", num, at, typ)
			}
			v, l := protowire.ConsumeBytes(m)
			if l < 0 {
				return corrupt("AggregatedRecord field %d at byte %d: %v", num, at, protowire.ParseError(l))
			}
			m = m[l:]
			switch num {
			case fieldPartitionKeyTable:
				d.pkRaw = append(d.pkRaw, v)
				keyBytes += len(v)
			case fieldExplicitHashKeyTable:
				d.ehkRaw = append(d.ehkRaw, v)
				keyBytes += len(v)
			default:
				pk, ehk, hasEHK, data, ok := parseRecordFast(v)
				if !ok {
					var err error
					if pk, ehk, hasEHK, data, err = parseRecord(v); err != nil {
						return corrupt("record %d: %v", len(d.recs), err)
					}
				}
				d.recs = append(d.recs, userRecord{data: data[:len(data):len(data)], pk: pk, ehk: ehk, hasEHK: hasEHK})
			}
		default:
			l := protowire.ConsumeFieldValue(num, typ, m)
			if l < 0 {
				return corrupt("AggregatedRecord field %d at byte %d: %v", num, at, protowire.ParseError(l))
			}
			m = m[l:]
		}
	}
	if len(d.recs) == 0 {
		return corrupt("no user records")
	}
	npk, nehk := uint64(len(d.pkRaw)), uint64(len(d.ehkRaw))
	for i := range d.recs {
		r := &d.recs[i]
		if r.pk >= npk {
			return corrupt("record %d: partition key index %d out of range (table of %d)", i, r.pk, npk)
		}
		r.slot = int(r.pk)
		if r.hasEHK {
			if r.ehk >= nehk {
				return corrupt("record %d: explicit hash key index %d out of range (table of %d)", i, r.ehk, nehk)
			}
			r.slot = int(npk + r.ehk)
		}
	}

	// The keys as strings: one allocation per aggregate, whatever the
	// number of keys, sliced into each key.
	var sb strings.Builder
	sb.Grow(keyBytes)
	for _, v := range d.pkRaw {
		sb.Write(v)
	}
	for _, v := range d.ehkRaw {
		sb.Write(v)
	}
	keys := sb.String()
	off := 0
	for _, v := range d.pkRaw {
		d.pks = append(d.pks, keys[off:off+len(v)])
		off += len(v)
	}
	for _, v := range d.ehkRaw {
		d.ehks = append(d.ehks, keys[off:off+len(v)])
		off += len(v)
	}
	return nil
}

// parseRecordFast decodes a Record message encoded as the KPL writes it:
// partition_key_index, perhaps explicit_hash_key_index, then data, and
// nothing else. It returns ok false for anything else (tags, another
// order, a repeated field, a bad varint or length), which parseRecord
// then decodes or refuses; when ok, its result is parseRecord's
// (FuzzRecordFastPath).
func parseRecordFast(m []byte) (pk, ehk uint64, hasEHK bool, data []byte, ok bool) {
	const (
		pkTag   = fieldPartitionKeyIndex<<3 | byte(protowire.VarintType)
		ehkTag  = fieldExplicitHashKeyIndex<<3 | byte(protowire.VarintType)
		dataTag = fieldData<<3 | byte(protowire.BytesType)
	)
	if len(m) == 0 || m[0] != pkTag {
		return 0, 0, false, nil, false
	}
	pk, l := protowire.ConsumeVarint(m[1:])
	if l < 0 {
		return 0, 0, false, nil, false
	}
	m = m[1+l:]
	if len(m) > 0 && m[0] == ehkTag {
		if ehk, l = protowire.ConsumeVarint(m[1:]); l < 0 {
			return 0, 0, false, nil, false
		}
		hasEHK = true
		m = m[1+l:]
	}
	if len(m) == 0 || m[0] != dataTag {
		return 0, 0, false, nil, false
	}
	data, l = protowire.ConsumeBytes(m[1:])
	if l < 0 || 1+l != len(m) {
		return 0, 0, false, nil, false
	}
	return pk, ehk, hasEHK, data, true
}

// parseRecord decodes one Record message: its partition key index, its
// explicit hash key index (when hasEHK) and its data. It checks wire
// types and required fields; tags are checked and skipped; a repeated
// field's last value wins, as in protobuf.
func parseRecord(m []byte) (pk, ehk uint64, hasEHK bool, data []byte, err error) {
	var hasPK, hasData bool
	for len(m) > 0 {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return 0, 0, false, nil, protowire.ParseError(l)
		}
		m = m[l:]
		want := protowire.Type(-1)
		switch num {
		case fieldPartitionKeyIndex, fieldExplicitHashKeyIndex:
			want = protowire.VarintType
		case fieldData, fieldTags:
			want = protowire.BytesType
		}
		if want >= 0 && typ != want {
			return 0, 0, false, nil, fmt.Errorf("field %d: wire type %d, want %d", num, typ, want)
		}
		switch num {
		case fieldPartitionKeyIndex, fieldExplicitHashKeyIndex:
			v, l := protowire.ConsumeVarint(m)
			if l < 0 {
				return 0, 0, false, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
			}
			m = m[l:]
			if num == fieldPartitionKeyIndex {
				pk, hasPK = v, true
			} else {
				ehk, hasEHK = v, true
			}
		case fieldData, fieldTags:
			v, l := protowire.ConsumeBytes(m)
			if l < 0 {
				return 0, 0, false, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
			}
			m = m[l:]
			if num == fieldData {
				data, hasData = v, true
			} else if err := checkTag(v); err != nil {
				return 0, 0, false, nil, fmt.Errorf("tag: %w", err)
			}
		default:
			l := protowire.ConsumeFieldValue(num, typ, m)
			if l < 0 {
				return 0, 0, false, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
			}
			m = m[l:]
		}
	}
	switch {
	case !hasPK:
		return 0, 0, false, nil, errors.New("missing required partition_key_index")
	case !hasData:
		return 0, 0, false, nil, errors.New("missing required data")
	}
	return pk, ehk, hasEHK, data, nil
}

// checkTag checks one Tag message: its required key, and wire types.
func checkTag(m []byte) error {
	hasKey := false
	for len(m) > 0 {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return protowire.ParseError(l)
		}
		m = m[l:]
		if (num == fieldTagKey || num == fieldTagValue) && typ != protowire.BytesType {
			return fmt.Errorf("field %d: wire type %d, want %d", num, typ, protowire.BytesType)
		}
		l = protowire.ConsumeFieldValue(num, typ, m)
		if l < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
		}
		m = m[l:]
		hasKey = hasKey || num == fieldTagKey
	}
	if !hasKey {
		return errors.New("missing required key")
	}
	return nil
}
