package kinesistest

import (
	"bytes"
	"crypto/md5"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Aggregate writes the KPL format: magic, protobuf, MD5 of the protobuf;
// keys once per table; the entry keyed like the first user record. Its
// records decode to the input in kinesisload's tests (TestKPLRoundTrip)
// and in aws-kinesis-agg's (TestKPLInteropAwsKinesisAgg).
func TestAggregateFormat(t *testing.T) {
	e, err := Aggregate([]UserRecord{
		{PartitionKey: "a", ExplicitHashKey: "7", Data: []byte("x")},
		{PartitionKey: "a", Data: []byte("y")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xF3, 0x89, 0x9A, 0xC2,
		0x0a, 0x01, 'a', // partition_key_table "a"
		0x12, 0x01, '7', // explicit_hash_key_table "7"
		0x1a, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x01, 'x', // record 0: pk 0, ehk 0, data x
		0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, 'y', // record 1: pk 0, data y
	}
	sum := md5.Sum(want[4:])
	want = append(want, sum[:]...)
	if !bytes.Equal(e.Data, want) {
		t.Errorf("Data = % x\nwant   % x", e.Data, want)
	}
	if aws.ToString(e.PartitionKey) != "a" || aws.ToString(e.ExplicitHashKey) != "7" {
		t.Errorf("keys = %q, %q; want the first user record's", aws.ToString(e.PartitionKey), aws.ToString(e.ExplicitHashKey))
	}
	if _, err := Aggregate(nil); err == nil {
		t.Error("Aggregate(nil) succeeded")
	}
	if _, err := Aggregate([]UserRecord{{Data: []byte("x")}}); err == nil {
		t.Error("Aggregate with an empty partition key succeeded")
	}
}
