//go:build !race

package kinesisload

import (
	"fmt"
	"testing"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// De-aggregating a page allocates nothing per user record: one string per
// aggregate (its keys, which its user records slice) and the Record
// slice, grown to the page's size once it has seen an aggregate rather
// than doubled aggregate after aggregate. (Not under the race detector,
// which allocates on its own.)
func TestDecodePageAllocations(t *testing.T) {
	const aggregates, perAggregate = 20, 50
	var recs []Record
	for a := range aggregates {
		var users []kinesistest.UserRecord
		for u := range perAggregate {
			users = append(users, kinesistest.UserRecord{PartitionKey: fmt.Sprintf("key-%d-%d", a, u), Data: []byte("0123456789")})
		}
		recs = append(recs, aggregate(t, fmt.Sprint(a+1), users...))
	}
	rs := kinesisRecords(recs...)
	full := allHashKeys
	d := pageDecoder{dec: &kplDecoder{keys: full, outside: func(Record, int, Record, hashKey, bool) {}}}
	var n int
	allocs := testing.AllocsPerRun(20, func() {
		out, _ := d.decode(rs)
		n = len(out)
	})
	if n != aggregates*perAggregate {
		t.Fatalf("%d user records, want %d", n, aggregates*perAggregate)
	}
	if limit := float64(aggregates + 3); allocs > limit {
		t.Errorf("%.0f allocations per page of %d aggregates (%d user records), want at most %.0f: one per aggregate and three for the Record slice", allocs, aggregates, n, limit)
	}
}
