package kinesisload

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"google.golang.org/protobuf/encoding/protowire"
)

// The KPL aggregation format (KCL's AggregatorUtil and messages.proto):
// the 4 magic bytes, the protobuf AggregatedRecord, and the MD5 of the
// protobuf bytes (16 bytes). The proto2 schema:
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4;
//	}
//	message Tag {
//	  required string key   = 1;
//	  optional string value = 2;
//	}

// kplMagic starts every KPL aggregated record.
var kplMagic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// ErrBadAggregate is wrapped by the error reported to [HookDecodeFailed]
// for a record that starts with the KPL magic bytes but fails a check (too
// short, MD5, protobuf, a missing required field, an index out of range,
// no user records). Such a record is delivered as one plain record.
var ErrBadAggregate = errors.New("kinesisload: bad KPL aggregated record")

// Protobuf field numbers of the KPL schema.
const (
	kplPartitionKeyTable  = 1
	kplExplicitHashKeyTbl = 2
	kplRecords            = 3
	kplRecPartitionKeyIdx = 1
	kplRecExplicitHashIdx = 2
	kplRecData            = 3
	kplRecTags            = 4
	kplTagKey             = 1
	kplTagValue           = 2
)

// hashKey is an unsigned 128-bit Kinesis hash key.
type hashKey struct{ hi, lo uint64 }

func (a hashKey) less(b hashKey) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// String returns k in decimal, as Kinesis writes hash keys.
func (k hashKey) String() string {
	if k.hi == 0 {
		return fmt.Sprint(k.lo)
	}
	var buf [40]byte
	i := len(buf)
	for k.hi != 0 || k.lo != 0 {
		var r uint64
		k.hi, r = bits.Div64(0, k.hi, 10)
		k.lo, r = bits.Div64(r, k.lo, 10)
		i--
		buf[i] = byte('0' + r)
	}
	return string(buf[i:])
}

// parseHashKey parses a decimal hash key: 1 to 39 digits, at most 2^128-1.
func parseHashKey(s string) (hashKey, bool) {
	if len(s) == 0 || len(s) > 39 {
		return hashKey{}, false
	}
	var k hashKey
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return hashKey{}, false
		}
		// k = k*10 + c
		hiHi, hiLo := bits.Mul64(k.hi, 10)
		loHi, loLo := bits.Mul64(k.lo, 10)
		hi, carry := bits.Add64(hiLo, loHi, 0)
		if hiHi != 0 || carry != 0 {
			return hashKey{}, false
		}
		lo, carry := bits.Add64(loLo, uint64(c-'0'), 0)
		hi, carry2 := bits.Add64(hi, 0, carry)
		if carry2 != 0 {
			return hashKey{}, false
		}
		k = hashKey{hi, lo}
	}
	return k, true
}

// partitionHashKey is the hash key Kinesis gives a partition key: the MD5
// of its UTF-8 bytes as a big-endian unsigned 128-bit integer.
func partitionHashKey(pk []byte) hashKey {
	sum := md5.Sum(pk)
	return hashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

// hashRange is a shard's inclusive hash key range.
type hashRange struct {
	start, end hashKey
	known      bool
}

// shardHashRange returns s's hash key range; not known when ListShards
// did not give one that parses.
func shardHashRange(s types.Shard) hashRange {
	if s.HashKeyRange == nil {
		return hashRange{}
	}
	lo, ok1 := parseHashKey(aws.ToString(s.HashKeyRange.StartingHashKey))
	hi, ok2 := parseHashKey(aws.ToString(s.HashKeyRange.EndingHashKey))
	if !ok1 || !ok2 || hi.less(lo) {
		return hashRange{}
	}
	return hashRange{start: lo, end: hi, known: true}
}

func (r hashRange) contains(k hashKey) bool { return !k.less(r.start) && !r.end.less(k) }

// kplDecoder is the default [Decoder]: KPL de-aggregation. The Loader
// makes one per consume loop; it is not safe for concurrent use (its
// tables are reused from record to record).
type kplDecoder struct {
	// keys is the shard's hash key range; when known, every user record
	// whose effective hash key is outside it is reported to outside
	// (and delivered all the same).
	keys    hashRange
	outside func(r Record, n int, first Record, key hashKey, ok bool)

	// Reused between records: the key tables, raw and as strings, and
	// their hash keys.
	pkRaw, ehkRaw   [][]byte
	pks, ehks       []string
	pkHash, ehkHash []hashKey
	ehkOK           []bool
}

// badAggregate returns an error wrapping ErrBadAggregate.
func badAggregate(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadAggregate}, args...)...)
}

// Decode implements [Decoder]. Each user record's Data aliases r.Data (its
// capacity is cut to its length, so appending to it copies).
func (d *kplDecoder) Decode(dst []Record, r Record) ([]Record, error) {
	b := r.Data
	if !bytes.HasPrefix(b, kplMagic) {
		return append(dst, r), nil
	}
	if len(b) < len(kplMagic)+md5.Size {
		return dst, badAggregate("%d bytes, shorter than the magic bytes and the MD5", len(b))
	}
	body := b[len(kplMagic) : len(b)-md5.Size]
	if sum := md5.Sum(body); !bytes.Equal(sum[:], b[len(b)-md5.Size:]) {
		return dst, badAggregate("MD5 mismatch")
	}

	// Pass 1: the key tables (which may come after the records) and the
	// number of records.
	d.pkRaw, d.ehkRaw = d.pkRaw[:0], d.ehkRaw[:0]
	n, keyBytes := 0, 0
	for m := body; len(m) > 0; {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return dst, badAggregate("AggregatedRecord at byte %d: %v", len(body)-len(m), protowire.ParseError(l))
		}
		at := len(body) - len(m)
		m = m[l:]
		switch num {
		case kplPartitionKeyTable, kplExplicitHashKeyTbl, kplRecords:
			if typ != protowire.BytesType {
				return dst, badAggregate("AggregatedRecord field %d at byte %d: wire type %d, want bytes", num, at, typ)
			}
			v, l := protowire.ConsumeBytes(m)
			if l < 0 {
				return dst, badAggregate("AggregatedRecord field %d at byte %d: %v", num, at, protowire.ParseError(l))
			}
			m = m[l:]
			switch num {
			case kplPartitionKeyTable:
				d.pkRaw = append(d.pkRaw, v)
				keyBytes += len(v)
			case kplExplicitHashKeyTbl:
				d.ehkRaw = append(d.ehkRaw, v)
				keyBytes += len(v)
			default:
				n++
			}
		default:
			l := protowire.ConsumeFieldValue(num, typ, m)
			if l < 0 {
				return dst, badAggregate("AggregatedRecord field %d at byte %d: %v", num, at, protowire.ParseError(l))
			}
			m = m[l:]
		}
	}
	if n == 0 {
		return dst, badAggregate("no user records")
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
	d.pks, d.ehks = d.pks[:0], d.ehks[:0]
	off := 0
	for _, v := range d.pkRaw {
		d.pks = append(d.pks, keys[off:off+len(v)])
		off += len(v)
	}
	for _, v := range d.ehkRaw {
		d.ehks = append(d.ehks, keys[off:off+len(v)])
		off += len(v)
	}
	if d.keys.known {
		d.pkHash = d.pkHash[:0]
		for _, v := range d.pkRaw {
			d.pkHash = append(d.pkHash, partitionHashKey(v))
		}
		d.ehkHash, d.ehkOK = d.ehkHash[:0], d.ehkOK[:0]
		for _, v := range d.ehkRaw {
			k, ok := parseHashKey(string(v)) // no allocation: the conversion does not escape
			d.ehkHash, d.ehkOK = append(d.ehkHash, k), append(d.ehkOK, ok)
		}
	}

	// Pass 2: the records.
	start := len(dst)
	if cap(dst)-start < n {
		// Double, so that a page of many aggregates copies its records
		// a bounded number of times.
		grown := make([]Record, start, max(2*cap(dst), start+n))
		copy(grown, dst)
		dst = grown
	}
	out := dst[:start+n]
	var firstOut Record
	var firstKey hashKey
	firstOK := false
	outside := 0
	i := 0
	for m := body; len(m) > 0; {
		num, typ, l := protowire.ConsumeTag(m)
		m = m[l:] // pass 1 checked every tag and length at this level
		if num != kplRecords {
			m = m[protowire.ConsumeFieldValue(num, typ, m):]
			continue
		}
		v, l := protowire.ConsumeBytes(m)
		m = m[l:]
		pki, ehki, hasEHK, data, ok := parseKPLRecordFast(v)
		var err error
		if !ok {
			pki, ehki, hasEHK, data, err = parseKPLRecord(v)
		}
		if err != nil {
			clear(out[start:])
			return dst[:start], badAggregate("record %d: %v", i, err)
		}
		if pki >= uint64(len(d.pkRaw)) {
			clear(out[start:])
			return dst[:start], badAggregate("record %d: partition key index %d out of range (table of %d)", i, pki, len(d.pkRaw))
		}
		if hasEHK && ehki >= uint64(len(d.ehkRaw)) {
			clear(out[start:])
			return dst[:start], badAggregate("record %d: explicit hash key index %d out of range (table of %d)", i, ehki, len(d.ehkRaw))
		}
		u := &out[start+i]
		*u = Record{
			Data:              data[:len(data):len(data)],
			PartitionKey:      d.pks[pki],
			SequenceNumber:    r.SequenceNumber,
			SubSequenceNumber: int64(i),
			ArrivalTime:       r.ArrivalTime,
			Aggregated:        true,
		}
		if hasEHK {
			u.ExplicitHashKey = d.ehks[ehki]
		}
		if d.keys.known {
			k, ok := d.pkHash[pki], true
			if hasEHK {
				k, ok = d.ehkHash[ehki], d.ehkOK[ehki]
			}
			if !ok || !d.keys.contains(k) {
				if outside == 0 {
					firstOut, firstKey, firstOK = *u, k, ok
				}
				outside++
			}
		}
		i++
	}
	if outside > 0 && d.outside != nil {
		d.outside(r, outside, firstOut, firstKey, firstOK)
	}
	return out, nil
}

// parseKPLRecordFast decodes a Record message encoded as the KPL writes
// it: partition_key_index, perhaps explicit_hash_key_index, then data, and
// nothing else. It returns ok false for anything else (tags, another
// order, a repeated field, a bad varint or length), which parseKPLRecord
// then decodes or refuses; when ok, its result is parseKPLRecord's.
func parseKPLRecordFast(m []byte) (pki, ehki uint64, hasEHK bool, data []byte, ok bool) {
	const (
		pkTag   = kplRecPartitionKeyIdx<<3 | byte(protowire.VarintType)
		ehkTag  = kplRecExplicitHashIdx<<3 | byte(protowire.VarintType)
		dataTag = kplRecData<<3 | byte(protowire.BytesType)
	)
	if len(m) == 0 || m[0] != pkTag {
		return 0, 0, false, nil, false
	}
	pki, l := protowire.ConsumeVarint(m[1:])
	if l < 0 {
		return 0, 0, false, nil, false
	}
	m = m[1+l:]
	if len(m) > 0 && m[0] == ehkTag {
		if ehki, l = protowire.ConsumeVarint(m[1:]); l < 0 {
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
	return pki, ehki, hasEHK, data, true
}

// parseKPLRecord decodes one Record message: its partition key index,
// its explicit hash key index (when hasEHK) and its data. It checks wire
// types and required fields; tags are checked and skipped.
func parseKPLRecord(m []byte) (pki, ehki uint64, hasEHK bool, data []byte, err error) {
	var hasPK, hasData bool
	for len(m) > 0 {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return 0, 0, false, nil, protowire.ParseError(l)
		}
		m = m[l:]
		want := protowire.Type(-1)
		switch num {
		case kplRecPartitionKeyIdx, kplRecExplicitHashIdx:
			want = protowire.VarintType
		case kplRecData, kplRecTags:
			want = protowire.BytesType
		}
		if want >= 0 && typ != want {
			return 0, 0, false, nil, fmt.Errorf("field %d: wire type %d, want %d", num, typ, want)
		}
		switch num {
		case kplRecPartitionKeyIdx, kplRecExplicitHashIdx:
			v, l := protowire.ConsumeVarint(m)
			if l < 0 {
				return 0, 0, false, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
			}
			m = m[l:]
			if num == kplRecPartitionKeyIdx {
				pki, hasPK = v, true
			} else {
				ehki, hasEHK = v, true
			}
		case kplRecData, kplRecTags:
			v, l := protowire.ConsumeBytes(m)
			if l < 0 {
				return 0, 0, false, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
			}
			m = m[l:]
			if num == kplRecData {
				data, hasData = v, true
			} else if err := checkKPLTag(v); err != nil {
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
	return pki, ehki, hasEHK, data, nil
}

// checkKPLTag checks one Tag message: its required key, and wire types.
func checkKPLTag(m []byte) error {
	hasKey := false
	for len(m) > 0 {
		num, typ, l := protowire.ConsumeTag(m)
		if l < 0 {
			return protowire.ParseError(l)
		}
		m = m[l:]
		if (num == kplTagKey || num == kplTagValue) && typ != protowire.BytesType {
			return fmt.Errorf("field %d: wire type %d, want %d", num, typ, protowire.BytesType)
		}
		l = protowire.ConsumeFieldValue(num, typ, m)
		if l < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(l))
		}
		m = m[l:]
		hasKey = hasKey || num == kplTagKey
	}
	if !hasKey {
		return errors.New("missing required key")
	}
	return nil
}
