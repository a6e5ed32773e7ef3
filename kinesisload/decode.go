package kinesisload

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Decoder turns one Kinesis record into the user records it carries; set
// one in Config.Decoder. The default (nil) is KPL de-aggregation: a record
// written by the Kinesis Producer Library's aggregation is delivered as its
// user records, anything else as it was read (see the package docs,
// "KPL aggregation"). [RawDecoder] turns de-aggregation off.
//
// Decode appends to dst the user records that r carries, in order, and
// returns the extended slice; a record that is not in the decoder's format
// is appended as is. r is the record as read from Kinesis
// (SubSequenceNumber 0, no ExplicitHashKey, Aggregated false). Every
// record appended must keep r's SequenceNumber and have a
// SubSequenceNumber that grows within r, so that the pair stays unique.
// The records may alias r.Data.
//
// When r looks encoded but fails a check, Decode returns an error and dst
// with its length unchanged: the Loader then delivers r as one plain
// record, never drops it, and reports the error to [HookDecodeFailed].
//
// Decode is called from one goroutine per shard, concurrently for
// different shards, and must not block. A panic is recovered and treated
// like an error.
type Decoder interface {
	// Decode appends the user records of r to dst (see above).
	Decode(dst []Record, r Record) ([]Record, error)
}

// DecoderFunc adapts a function to the [Decoder] interface.
type DecoderFunc func(dst []Record, r Record) ([]Record, error)

// Decode calls f(dst, r).
func (f DecoderFunc) Decode(dst []Record, r Record) ([]Record, error) { return f(dst, r) }

// RawDecoder delivers every Kinesis record as it was read, aggregated or
// not: set Config.Decoder to it to turn KPL de-aggregation off.
var RawDecoder Decoder = DecoderFunc(func(dst []Record, r Record) ([]Record, error) {
	return append(dst, r), nil
})

// pageDecoder turns the Kinesis records of one page into the user records
// of one Batch. One belongs to one consume loop.
type pageDecoder struct {
	dec Decoder
	// failed is called for a record delivered as plain because Decode
	// failed on it.
	failed func(r Record, err error)
}

// decode returns the user records of rs, in order, and their bytes (data
// plus partition keys). A whole page becomes one batch: nothing here, nor
// anywhere between the reader and the Sink, cuts a page, so an aggregate
// (one Kinesis record) is never split across batches and every checkpoint
// is on a whole Kinesis record (TestAggregateNeverSplit).
func (d *pageDecoder) decode(rs []types.Record) ([]Record, int64) {
	out := make([]Record, 0, len(rs))
	var total, seen int
	for i := range rs {
		total += len(rs[i].Data)
	}
	for i := range rs {
		out = growForDecode(out, i, len(rs[i].Data), seen, total)
		seen += len(rs[i].Data)
		r := Record{
			Data:           rs[i].Data,
			PartitionKey:   aws.ToString(rs[i].PartitionKey),
			SequenceNumber: aws.ToString(rs[i].SequenceNumber),
			ArrivalTime:    aws.ToTime(rs[i].ApproximateArrivalTimestamp),
		}
		prev := out
		next, err := decodeSafely(d.dec, prev, r)
		if err == nil && len(next) < len(prev) {
			err = fmt.Errorf("kinesisload: the decoder shortened the record slice from %d to %d", len(prev), len(next))
		}
		if err != nil {
			// Deliver r as read; whatever the decoder wrote past
			// len(prev) is dropped, or overwritten here.
			clear(prev[len(prev):cap(prev)])
			out = append(prev, r)
			if d.failed != nil {
				d.failed(r, err)
			}
			continue
		}
		out = next
	}
	var bytes int64
	for i := range out {
		bytes += int64(len(out[i].Data) + len(out[i].PartitionKey))
	}
	return out, bytes
}

// growForDecode makes room in out, which holds the user records of the
// first i Kinesis records of a page (seen bytes of the page's total), for
// those of the next one, of size bytes. Once the records seen have turned
// into more user records than Kinesis records (aggregates), it grows out
// to the page's expected total at the rate seen so far, plus an eighth:
// one or two copies per page instead of one per doubling, each of which
// the garbage collector would zero and scan. A decoder that needs more
// still grows the slice itself.
func growForDecode(out []Record, i, size, seen, total int) []Record {
	if len(out) <= i || seen == 0 {
		return out
	}
	// The user records expected from this record, at the rate seen.
	need := int(int64(len(out))*int64(size)/int64(seen)) + 1
	if cap(out)-len(out) >= need {
		return out
	}
	want := int(int64(len(out)) * int64(total) / int64(seen))
	want += want / 8
	grown := make([]Record, len(out), max(want, len(out)+need))
	copy(grown, out)
	return grown
}

// decodeSafely calls dec and turns a panic into an error.
func decodeSafely(dec Decoder, dst []Record, r Record) (out []Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = dst, fmt.Errorf("kinesisload: the decoder panicked: %v", p)
		}
	}()
	return dec.Decode(dst, r)
}

// decodedCost is what the user records of a page cost the buffer budget
// beyond what the page was counted (pageCost: one Record per Kinesis
// record): recordOverhead for every user record beyond one per Kinesis
// record, plus the keys of every de-aggregated user record (an aggregate's
// keys are one allocation, shared by its user records; counting each
// user record's keys over-counts shared keys, never under-counts).
func decodedCost(kinesisRecords int, rs []Record) int64 {
	var n int64
	if extra := len(rs) - kinesisRecords; extra > 0 {
		n = int64(extra) * recordOverhead
	}
	for i := range rs {
		if rs[i].Aggregated {
			n += int64(len(rs[i].PartitionKey) + len(rs[i].ExplicitHashKey))
		}
	}
	return n
}
