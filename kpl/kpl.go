package kpl

import (
	"crypto/md5"
	"errors"
	"fmt"
)

// Magic is the 4 bytes every aggregated record starts with.
const Magic = "\xF3\x89\x9A\xC2"

// Errors. Check them with [errors.Is]; the errors returned say which check
// failed.
var (
	// ErrNotAggregated is returned for data that does not start with
	// [Magic]: a plain Kinesis record, to be used as it is.
	ErrNotAggregated = errors.New("kpl: not an aggregated record")
	// ErrCorrupt is wrapped by the error returned for data that starts
	// with [Magic] but fails a check: too short, MD5 mismatch, protobuf
	// wire format, a missing required field, an index out of its table,
	// no user records. KCL, and the tidemark Loader, use such a record as
	// one plain record.
	ErrCorrupt = errors.New("kpl: corrupt aggregated record")
)

// Protobuf field numbers of the schema in the package docs.
const (
	fieldPartitionKeyTable    = 1 // AggregatedRecord.partition_key_table
	fieldExplicitHashKeyTable = 2 // AggregatedRecord.explicit_hash_key_table
	fieldRecords              = 3 // AggregatedRecord.records
	fieldPartitionKeyIndex    = 1 // Record.partition_key_index
	fieldExplicitHashKeyIndex = 2 // Record.explicit_hash_key_index
	fieldData                 = 3 // Record.data
	fieldTags                 = 4 // Record.tags
	fieldTagKey               = 1 // Tag.key
	fieldTagValue             = 2 // Tag.value
)

// UserRecord is one record as a producer hands it to the KPL: one of the
// records an aggregated record carries.
type UserRecord struct {
	// PartitionKey is required.
	PartitionKey string
	// ExplicitHashKey is optional ("" for none): a decimal hash key that
	// overrides the partition key's MD5 for routing.
	ExplicitHashKey string
	// Data is the payload. De-aggregated, it aliases the aggregated
	// record's bytes; it is empty, not nil, when there is none.
	Data []byte
}

// HashKey returns u's hash key: its explicit hash key if it has one, else
// the MD5 of its partition key ([PartitionKeyHash]). ok is false when the
// explicit hash key is not a decimal number in [0, 2^128-1] (Kinesis
// refuses such a key for a record of its own).
func (u UserRecord) HashKey() (k HashKey, ok bool) {
	if u.ExplicitHashKey == "" {
		return PartitionKeyHash(u.PartitionKey), true
	}
	return parseHashKey(u.ExplicitHashKey)
}

// IsAggregated reports whether data starts with [Magic], that is, whether
// it claims to be an aggregated record. It may still fail to decode.
func IsAggregated(data []byte) bool {
	return len(data) >= len(Magic) && string(data[:len(Magic)]) == Magic
}

// corrupt returns an error wrapping ErrCorrupt.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// trailerSize is the size of the MD5 that ends an aggregated record.
const trailerSize = md5.Size
