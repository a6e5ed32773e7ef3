package kinesistest

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kpl"
)

// UserRecord is one record as a producer hands it to the Kinesis Producer
// Library (KPL) for aggregation: [kpl.UserRecord].
type UserRecord = kpl.UserRecord

// Aggregate packs user records, in order, into one Kinesis record in the
// KPL aggregation format ([kpl.Aggregate]), as the KPL and the awslabs
// aggregation modules write it: the magic bytes F3 89 9A C2, the protobuf
// AggregatedRecord (partition and explicit hash keys each stored once in a
// table, one Record per user record with its table indexes and data), and
// the MD5 of the protobuf bytes. The entry it returns is put with the first
// user record's partition key and explicit hash key, as the KPL does, so it
// is routed to the first user record's shard; put it with PutRecords, or
// its fields with PutRecord.
//
// Use it to test a Sink against aggregated input: the Loader delivers the
// entry as the user records given here, each with its index as
// SubSequenceNumber. It fails on no records and on an empty partition key;
// it does not check Kinesis's 1 MiB record size.
func Aggregate(records []UserRecord) (types.PutRecordsRequestEntry, error) {
	data, err := kpl.Aggregate(records)
	if err != nil {
		return types.PutRecordsRequestEntry{}, err
	}
	e := types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(records[0].PartitionKey)}
	if records[0].ExplicitHashKey != "" {
		e.ExplicitHashKey = aws.String(records[0].ExplicitHashKey)
	}
	return e, nil
}
