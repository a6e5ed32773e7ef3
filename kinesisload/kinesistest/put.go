package kinesistest

import (
	"context"
	"crypto/md5"
	"math/big"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// hashKey returns the 128-bit hash key of a record: ExplicitHashKey if
// given, else the MD5 of the partition key as a big-endian number.
func hashKey(partitionKey string, explicit *string) (*big.Int, error) {
	if explicit != nil {
		h, ok := parseHashKey(*explicit)
		if !ok || h.Cmp(maxHashKey) > 0 {
			return nil, errInvalidArgument("Invalid ExplicitHashKey. ExplicitHashKey must be in the range: [0, 2^128-1]. Specified value was %s", *explicit)
		}
		return h, nil
	}
	sum := md5.Sum([]byte(partitionKey))
	return new(big.Int).SetBytes(sum[:]), nil
}

// parseHashKey reads a non-negative decimal hash key: digits only, no sign.
func parseHashKey(s string) (*big.Int, bool) {
	if s == "" || len(s) > 39 {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return nil, false
		}
	}
	return new(big.Int).SetString(s, 10)
}

type putEntry struct {
	key  string
	data []byte
	hash *big.Int
}

func checkEntry(i int, data []byte, key *string, explicit *string) (putEntry, error) {
	field := "PartitionKey"
	if i >= 0 {
		field = "Records[" + strconv.Itoa(i) + "].PartitionKey"
	}
	if key == nil {
		return putEntry{}, errInvalidArgument("%s is required", field)
	}
	if n := utf8.RuneCountInString(*key); n < 1 || n > maxPartitionKeyLen {
		return putEntry{}, errInvalidArgument("%s has %d characters; it must have 1 to %d", field, n, maxPartitionKeyLen)
	}
	if size := len(data) + len(*key); size > maxRecordSize {
		return putEntry{}, errInvalidArgument("Record size %d bytes (data plus partition key) exceeds the limit of %d bytes", size, maxRecordSize)
	}
	h, err := hashKey(*key, explicit)
	if err != nil {
		return putEntry{}, err
	}
	return putEntry{key: *key, data: data, hash: h}, nil
}

// append stores entry e in the open shard of st that covers its hash key,
// subject to the write limits. f.mu must be held.
func (f *Fake) append(st *stream, e putEntry, now time.Time) (*shard, string, bool) {
	s := route(st, e.hash)
	if s == nil { // cannot happen: open shards always cover the key space
		return nil, "", false
	}
	size := len(e.data) + len(e.key)
	if !f.allowWrite(s, size, now) {
		s.stats.WritesThrottled++
		return s, "", false
	}
	arrival := now.Truncate(time.Millisecond)
	if arrival.Before(st.lastArrival) {
		arrival = st.lastArrival // arrival times never go back, even if the clock does
	}
	st.lastArrival = arrival
	r := record{seq: st.nextSeq(), key: e.key, data: append([]byte(nil), e.data...), arrival: arrival}
	f.trim(s, now)
	s.records = append(s.records, r)
	f.notifyLocked() // wake the subscriptions
	s.stats.RecordsWritten++
	s.stats.BytesWritten += int64(size)
	return s, seqString(r.seq, s.index), true
}

// PutRecord writes one record to the open shard whose hash-key range holds
// the MD5 of its partition key (or its ExplicitHashKey). A shard over its
// write limit gives *types.ProvisionedThroughputExceededException.
func (f *Fake) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	if in == nil {
		in = &kinesis.PutRecordInput{}
	}
	name := f.requestStream(in.StreamName, in.StreamARN)
	target := f.targetShard(name, in.PartitionKey, in.ExplicitHashKey)
	if err := f.enter(ctx, OpPutRecord, name, target); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.lookupStream(in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	e, err := checkEntry(-1, in.Data, in.PartitionKey, in.ExplicitHashKey)
	if err != nil {
		return nil, err
	}
	s, seq, ok := f.append(st, e, f.now())
	if !ok {
		return nil, f.errThrottled(st.name, s.id)
	}
	return &kinesis.PutRecordOutput{
		SequenceNumber: aws.String(seq),
		ShardId:        aws.String(s.id),
		EncryptionType: types.EncryptionTypeNone,
	}, nil
}

// targetShard returns the shard a record would go to now, for fault
// matching ("" when it cannot be told).
func (f *Fake) targetShard(stream string, key, explicit *string) string {
	if stream == "" || key == nil {
		return ""
	}
	h, err := hashKey(*key, explicit)
	if err != nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.streams[stream]
	if !ok {
		return ""
	}
	if s := route(st, h); s != nil {
		return s.id
	}
	return ""
}

// PutRecords writes 1 to 500 records (5 MiB at most), each as PutRecord
// would. A request that breaks a request limit fails as a whole with
// *types.InvalidArgumentException; a record refused by a shard's write
// limit fails alone, with ErrorCode "ProvisionedThroughputExceededException",
// and is counted in FailedRecordCount.
func (f *Fake) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	if in == nil {
		in = &kinesis.PutRecordsInput{}
	}
	st, err := f.begin(ctx, OpPutRecords, in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if n := len(in.Records); n < 1 || n > maxPutRecordsCount {
		return nil, errInvalidArgument("Records has %d entries; PutRecords takes 1 to %d", n, maxPutRecordsCount)
	}
	entries := make([]putEntry, len(in.Records))
	total := 0
	for i, r := range in.Records {
		e, err := checkEntry(i, r.Data, r.PartitionKey, r.ExplicitHashKey)
		if err != nil {
			return nil, err
		}
		entries[i] = e
		total += len(e.data) + len(e.key)
	}
	if total > maxPutRecordsBytes {
		return nil, errInvalidArgument("Records total %d bytes; PutRecords takes at most %d", total, maxPutRecordsBytes)
	}
	now := f.now()
	out := &kinesis.PutRecordsOutput{Records: make([]types.PutRecordsResultEntry, len(entries)), EncryptionType: types.EncryptionTypeNone}
	failed := int32(0)
	for i, e := range entries {
		s, seq, ok := f.append(st, e, now)
		if !ok {
			failed++
			out.Records[i] = types.PutRecordsResultEntry{
				ErrorCode:    aws.String("ProvisionedThroughputExceededException"),
				ErrorMessage: aws.String(f.throttleMessage(st.name, s.id)),
			}
			continue
		}
		out.Records[i] = types.PutRecordsResultEntry{SequenceNumber: aws.String(seq), ShardId: aws.String(s.id)}
	}
	out.FailedRecordCount = aws.Int32(failed)
	return out, nil
}
