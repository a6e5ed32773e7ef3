// Package kpl reads and writes the aggregated record format of the Kinesis
// Producer Library (KPL), which packs many user records into one Kinesis
// record.
//
// # The format
//
// An aggregated record is the 4 magic bytes F3 89 9A C2 ([Magic]), a
// protobuf AggregatedRecord, and the MD5 of the protobuf bytes (16 bytes).
// The proto2 schema is the KPL's messages.proto:
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
//
// Each distinct key is stored once, in its table; a Record names its keys
// by index. A user record's index in records is its sub-sequence number:
// with the Kinesis record's sequence number, it identifies the user record
// (KCL's SubSequenceNumber). The Kinesis record itself is put with a
// partition key of its own; the KPL uses the first user record's, so that
// the aggregate goes to that record's shard.
//
// A user record's hash key ([HashKey]), which decides its shard, is its
// explicit hash key when it has one (a decimal number in [0, 2^128-1]),
// else the MD5 of its partition key read as a big-endian 128-bit number.
//
// # Writing and reading
//
// [Aggregate] builds an aggregated record from user records, as the KPL
// and the awslabs aggregation modules (aws-kinesis-agg) write it.
// [Deaggregate] returns the user records of one; a [Decoder] does the same
// for many records without allocating per user record, which is what the
// tidemark Loader uses. The user records' Data aliases the bytes decoded.
//
// # Failures
//
// Data without the magic bytes is not an aggregated record:
// [ErrNotAggregated]. Data with them that fails a check (too short, MD5,
// the protobuf wire format, a missing required field, an index out of its
// table, no user records) is refused with an error wrapping [ErrCorrupt],
// and no user record of it is returned. Nothing panics, whatever the input
// (the decoder is fuzzed). Like KCL, the tidemark Loader
// ([github.com/tidemark/tidemark/kinesisload]) then delivers the Kinesis
// record whole, as one plain record, and reports the error to its
// HookDecodeFailed: nothing is dropped. It also delivers user records whose
// hash key is outside the hash key range of the shard they were read from,
// and reports them.
package kpl
