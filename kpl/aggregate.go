package kpl

import (
	"crypto/md5"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Aggregate returns the aggregated record that carries records, in order,
// encoded as the KPL and the awslabs aggregation modules write it: [Magic],
// the AggregatedRecord (the key tables in order of first use, each key
// once; then one Record per user record: its partition key index, its
// explicit hash key index if it has one, its data), and the MD5.
// De-aggregating it gives records back, the i-th at index i.
//
// Put the result with a partition key (and explicit hash key) of its own;
// the KPL uses records[0]'s, so that it goes to that user record's shard.
//
// Aggregate fails on no records and on an empty partition key. It checks
// nothing else: not the explicit hash keys (see [ParseHashKey]), not the
// key lengths, not Kinesis's 1 MiB record size.
func Aggregate(records []UserRecord) ([]byte, error) {
	return AppendAggregate(nil, records)
}

// AppendAggregate appends to dst the aggregated record [Aggregate]
// returns, and returns the extended slice; on error, dst.
func AppendAggregate(dst []byte, records []UserRecord) ([]byte, error) {
	if len(records) == 0 {
		return dst, errors.New("kpl: Aggregate: no user records")
	}
	type index struct {
		pk, ehk uint64
		hasEHK  bool
	}
	indexes := make([]index, len(records))
	pkIndex, ehkIndex := map[string]uint64{}, map[string]uint64{}
	var pkTable, ehkTable []string
	for i, r := range records {
		if r.PartitionKey == "" {
			return dst, fmt.Errorf("kpl: Aggregate: user record %d: empty partition key", i)
		}
		n, ok := pkIndex[r.PartitionKey]
		if !ok {
			n = uint64(len(pkTable))
			pkIndex[r.PartitionKey] = n
			pkTable = append(pkTable, r.PartitionKey)
		}
		indexes[i].pk = n
		if r.ExplicitHashKey != "" {
			n, ok := ehkIndex[r.ExplicitHashKey]
			if !ok {
				n = uint64(len(ehkTable))
				ehkIndex[r.ExplicitHashKey] = n
				ehkTable = append(ehkTable, r.ExplicitHashKey)
			}
			indexes[i].ehk, indexes[i].hasEHK = n, true
		}
	}

	// The size, so that dst grows once.
	size := len(Magic) + trailerSize
	for _, k := range pkTable {
		size += 1 + protowire.SizeBytes(len(k))
	}
	for _, k := range ehkTable {
		size += 1 + protowire.SizeBytes(len(k))
	}
	recSize := func(i int) int {
		n := 1 + protowire.SizeVarint(indexes[i].pk) + 1 + protowire.SizeBytes(len(records[i].Data))
		if indexes[i].hasEHK {
			n += 1 + protowire.SizeVarint(indexes[i].ehk)
		}
		return n
	}
	for i := range records {
		size += 1 + protowire.SizeBytes(recSize(i))
	}
	if cap(dst)-len(dst) < size {
		grown := make([]byte, len(dst), len(dst)+size)
		copy(grown, dst)
		dst = grown
	}

	start := len(dst)
	b := append(dst, Magic...)
	for _, k := range pkTable {
		b = protowire.AppendTag(b, fieldPartitionKeyTable, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	for _, k := range ehkTable {
		b = protowire.AppendTag(b, fieldExplicitHashKeyTable, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	for i, r := range records {
		b = protowire.AppendTag(b, fieldRecords, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(recSize(i)))
		b = protowire.AppendTag(b, fieldPartitionKeyIndex, protowire.VarintType)
		b = protowire.AppendVarint(b, indexes[i].pk)
		if indexes[i].hasEHK {
			b = protowire.AppendTag(b, fieldExplicitHashKeyIndex, protowire.VarintType)
			b = protowire.AppendVarint(b, indexes[i].ehk)
		}
		b = protowire.AppendTag(b, fieldData, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Data)
	}
	sum := md5.Sum(b[start+len(Magic):])
	return append(b, sum[:]...), nil
}
