package kpl_test

import (
	"errors"
	"fmt"

	"github.com/tidemark/tidemark/kpl"
)

// Aggregate packs user records into one Kinesis record; Deaggregate gives
// them back, each at its index (its sub-sequence number).
func Example() {
	data, err := kpl.Aggregate([]kpl.UserRecord{
		{PartitionKey: "customer-1", Data: []byte("apple")},
		{PartitionKey: "customer-2", Data: []byte("pear")},
		{PartitionKey: "customer-1", ExplicitHashKey: "42", Data: []byte("plum")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Put data into Kinesis with the first user record's partition key,
	// as the KPL does; a consumer reads it back and de-aggregates it.
	users, err := kpl.Deaggregate(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, u := range users {
		k, _ := u.HashKey()
		fmt.Printf("%d %s %s (hash key %s)\n", i, u.PartitionKey, u.Data, k)
	}
	// Output:
	// 0 customer-1 apple (hash key 206123531217924687484981189258678458385)
	// 1 customer-2 pear (hash key 212355002865798546818991354054017694540)
	// 2 customer-1 plum (hash key 42)
}

// A Decoder de-aggregates record after record without allocating per user
// record. A record without the magic bytes is not aggregated: use it as
// it is. One that fails a check is corrupt: like KCL and the tidemark
// Loader, use it whole, as one record, and report it.
func ExampleDecoder() {
	agg, _ := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: "a", Data: []byte("one")}, {PartitionKey: "b", Data: []byte("two")}})
	corrupt := append([]byte(nil), agg...)
	corrupt[len(corrupt)-1] ^= 1 // the MD5 no longer matches

	var d kpl.Decoder
	for _, data := range [][]byte{agg, []byte("plain"), corrupt} {
		err := d.Decode(data)
		switch {
		case errors.Is(err, kpl.ErrNotAggregated):
			fmt.Printf("plain: %s\n", data)
		case errors.Is(err, kpl.ErrCorrupt):
			fmt.Printf("%d bytes delivered whole: %v\n", len(data), err)
		default:
			for i := range d.Len() {
				u := d.Record(i)
				fmt.Printf("user record %d: %s %s\n", i, u.PartitionKey, u.Data)
			}
		}
	}
	// Output:
	// user record 0: a one
	// user record 1: b two
	// plain: plain
	// 44 bytes delivered whole: kpl: corrupt aggregated record: MD5 mismatch
}
