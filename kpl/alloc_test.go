//go:build !race

package kpl

import (
	"fmt"
	"testing"
)

// A Decoder reused from aggregate to aggregate allocates one string per
// aggregate (its keys) and nothing per user record, hash keys included.
// (Not under the race detector, which allocates on its own.)
func TestDecoderAllocatesOncePerAggregate(t *testing.T) {
	var aggs [][]byte
	for a := range 4 {
		var users []UserRecord
		for u := range 50 + 10*a {
			users = append(users, UserRecord{PartitionKey: fmt.Sprintf("a-somewhat-long-partition-key-%d-%d", a, u), Data: []byte("0123456789")})
			users = append(users, UserRecord{PartitionKey: "k", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte("x")})
		}
		agg, err := Aggregate(users)
		if err != nil {
			t.Fatal(err)
		}
		aggs = append(aggs, agg)
	}
	var d Decoder
	n := 0
	allocs := testing.AllocsPerRun(20, func() {
		n = 0
		for _, agg := range aggs {
			if err := d.Decode(agg); err != nil {
				t.Fatal(err)
			}
			for i := range d.Len() {
				u := d.Record(i)
				if _, ok := d.HashKey(i); !ok {
					t.Fatalf("record %d: no hash key", i)
				}
				n += len(u.Data)
			}
		}
	})
	if want := float64(len(aggs)); allocs > want {
		t.Errorf("%.0f allocations for %d aggregates, want at most %.0f", allocs, len(aggs), want)
	}
}
