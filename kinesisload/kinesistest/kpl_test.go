package kinesistest

import (
	"bytes"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tidemark/tidemark/kpl"
)

// Aggregate's entry holds kpl.Aggregate's record (whose format kpl's tests
// check), keyed like the first user record, as the KPL puts it.
func TestAggregateEntryKeyedByFirstRecord(t *testing.T) {
	users := []UserRecord{
		{PartitionKey: "a", ExplicitHashKey: "7", Data: []byte("x")},
		{PartitionKey: "b", Data: []byte("y")},
	}
	e, err := Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := kpl.Aggregate(users)
	if !bytes.Equal(e.Data, want) {
		t.Errorf("Data = % x\nwant   % x", e.Data, want)
	}
	if aws.ToString(e.PartitionKey) != "a" || aws.ToString(e.ExplicitHashKey) != "7" {
		t.Errorf("keys = %q, %q; want the first user record's", aws.ToString(e.PartitionKey), aws.ToString(e.ExplicitHashKey))
	}
	e, err = Aggregate(users[1:])
	if err != nil || aws.ToString(e.PartitionKey) != "b" || e.ExplicitHashKey != nil {
		t.Errorf("keys = %q, %v (%v); want b and no explicit hash key", aws.ToString(e.PartitionKey), e.ExplicitHashKey, err)
	}
	if _, err := Aggregate(nil); err == nil {
		t.Error("Aggregate(nil) succeeded")
	}
	if _, err := Aggregate([]UserRecord{{Data: []byte("x")}}); err == nil {
		t.Error("Aggregate with an empty partition key succeeded")
	}
}
