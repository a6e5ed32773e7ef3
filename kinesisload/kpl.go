package kinesisload

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kpl"
)

// hashKey is an unsigned 128-bit Kinesis hash key.
type hashKey = kpl.HashKey

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
	lo, err1 := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.StartingHashKey))
	hi, err2 := kpl.ParseHashKey(aws.ToString(s.HashKeyRange.EndingHashKey))
	if err1 != nil || err2 != nil || hi.Compare(lo) < 0 {
		return hashRange{}
	}
	return hashRange{start: lo, end: hi, known: true}
}

func (r hashRange) contains(k hashKey) bool { return k.Compare(r.start) >= 0 && k.Compare(r.end) <= 0 }

// kplDecoder is the default [Decoder]: KPL de-aggregation with
// [kpl.Decoder]. The Loader makes one per consume loop; it is not safe
// for concurrent use.
type kplDecoder struct {
	// keys is the shard's hash key range; when known, every user record
	// whose effective hash key is outside it is reported to outside
	// (and delivered all the same).
	keys    hashRange
	outside func(r Record, n int, first Record, key hashKey, ok bool)

	dec kpl.Decoder
}

// Decode implements [Decoder]. Each user record's Data aliases r.Data (its
// capacity is cut to its length, so appending to it copies).
func (d *kplDecoder) Decode(dst []Record, r Record) ([]Record, error) {
	if !kpl.IsAggregated(r.Data) {
		return append(dst, r), nil
	}
	if err := d.dec.Decode(r.Data); err != nil {
		return dst, err
	}
	n := d.dec.Len()
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
	for i := range n {
		ur := d.dec.Record(i)
		u := &out[start+i]
		*u = Record{
			Data:              ur.Data,
			PartitionKey:      ur.PartitionKey,
			ExplicitHashKey:   ur.ExplicitHashKey,
			SequenceNumber:    r.SequenceNumber,
			SubSequenceNumber: int64(i),
			ArrivalTime:       r.ArrivalTime,
			Aggregated:        true,
		}
		if d.keys.known {
			k, ok := d.dec.HashKey(i)
			if !ok || !d.keys.contains(k) {
				if outside == 0 {
					firstOut, firstKey, firstOK = *u, k, ok
				}
				outside++
			}
		}
	}
	if outside > 0 && d.outside != nil {
		d.outside(r, outside, firstOut, firstKey, firstOK)
	}
	return out, nil
}
