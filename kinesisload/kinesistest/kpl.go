package kinesistest

import (
	"crypto/md5"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"google.golang.org/protobuf/encoding/protowire"
)

// UserRecord is one record as a producer hands it to the Kinesis Producer
// Library (KPL) for aggregation.
type UserRecord struct {
	// PartitionKey is required.
	PartitionKey string
	// ExplicitHashKey is optional: a decimal hash key that overrides the
	// partition key's MD5 for routing.
	ExplicitHashKey string
	Data            []byte
}

// kplMagic starts every KPL aggregated record.
var kplMagic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// Aggregate packs user records, in order, into one Kinesis record in the
// KPL aggregation format, as the KPL and the awslabs aggregation modules
// write it: the magic bytes F3 89 9A C2, the protobuf AggregatedRecord
// (partition and explicit hash keys each stored once in a table, one
// Record per user record with its table indexes and data), and the MD5 of
// the protobuf bytes. The entry it returns is put with the first user
// record's partition key and explicit hash key, as the KPL does, so it is
// routed to the first user record's shard; put it with PutRecords, or its
// fields with PutRecord.
//
// Use it to test a Sink against aggregated input: the Loader delivers the
// entry as the user records given here, each with its index as
// SubSequenceNumber. It fails on no records and on an empty partition key;
// it does not check Kinesis's 1 MiB record size.
func Aggregate(records []UserRecord) (types.PutRecordsRequestEntry, error) {
	if len(records) == 0 {
		return types.PutRecordsRequestEntry{}, errors.New("kinesistest: Aggregate: no user records")
	}
	pkIndex, ehkIndex := map[string]uint64{}, map[string]uint64{}
	var pkTable, ehkTable []string
	type idx struct {
		pk, ehk uint64
		hasEHK  bool
	}
	idxs := make([]idx, len(records))
	for i, r := range records {
		if r.PartitionKey == "" {
			return types.PutRecordsRequestEntry{}, fmt.Errorf("kinesistest: Aggregate: user record %d: empty partition key", i)
		}
		n, ok := pkIndex[r.PartitionKey]
		if !ok {
			n = uint64(len(pkTable))
			pkIndex[r.PartitionKey] = n
			pkTable = append(pkTable, r.PartitionKey)
		}
		idxs[i].pk = n
		if r.ExplicitHashKey != "" {
			n, ok := ehkIndex[r.ExplicitHashKey]
			if !ok {
				n = uint64(len(ehkTable))
				ehkIndex[r.ExplicitHashKey] = n
				ehkTable = append(ehkTable, r.ExplicitHashKey)
			}
			idxs[i].ehk, idxs[i].hasEHK = n, true
		}
	}
	b := append([]byte(nil), kplMagic...)
	for _, k := range pkTable {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	for _, k := range ehkTable {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	var rec []byte
	for i, r := range records {
		rec = rec[:0]
		rec = protowire.AppendTag(rec, 1, protowire.VarintType)
		rec = protowire.AppendVarint(rec, idxs[i].pk)
		if idxs[i].hasEHK {
			rec = protowire.AppendTag(rec, 2, protowire.VarintType)
			rec = protowire.AppendVarint(rec, idxs[i].ehk)
		}
		rec = protowire.AppendTag(rec, 3, protowire.BytesType)
		rec = protowire.AppendBytes(rec, r.Data)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, rec)
	}
	sum := md5.Sum(b[len(kplMagic):])
	b = append(b, sum[:]...)
	e := types.PutRecordsRequestEntry{Data: b, PartitionKey: aws.String(records[0].PartitionKey)}
	if records[0].ExplicitHashKey != "" {
		e.ExplicitHashKey = aws.String(records[0].ExplicitHashKey)
	}
	return e, nil
}
