package kpl

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchUsers returns user records of size bytes of data, about 50 KiB in
// all (the KPL's default AggregationMaxSize), each with its own 16-byte
// partition key.
func benchUsers(size int) []UserRecord {
	rng := rand.New(rand.NewPCG(1, 2))
	var users []UserRecord
	for total := 0; total+size+24 <= 50<<10; total += size + 24 {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		users = append(users, UserRecord{PartitionKey: fmt.Sprintf("%016x", rng.Uint64()), Data: data})
	}
	return users
}

// BenchmarkDecoder: de-aggregating one aggregate of about 50 KiB with a
// reused Decoder, reading every record, with and without its hash key
// (kinesisload's BenchmarkDecodePage measures the Loader's whole path).
func BenchmarkDecoder(b *testing.B) {
	for _, size := range []int{100, 1000} {
		agg, err := Aggregate(benchUsers(size))
		if err != nil {
			b.Fatal(err)
		}
		for _, hash := range []bool{false, true} {
			b.Run(fmt.Sprintf("user=%dB/hash=%v", size, hash), func(b *testing.B) {
				b.SetBytes(int64(len(agg)))
				b.ReportAllocs()
				var d Decoder
				for b.Loop() {
					if err := d.Decode(agg); err != nil {
						b.Fatal(err)
					}
					for i := range d.Len() {
						_ = d.Record(i)
						if hash {
							d.HashKey(i)
						}
					}
				}
			})
		}
	}
}

// BenchmarkAggregate: writing one aggregate of about 50 KiB.
func BenchmarkAggregate(b *testing.B) {
	for _, size := range []int{100, 1000} {
		users := benchUsers(size)
		b.Run(fmt.Sprintf("user=%dB", size), func(b *testing.B) {
			buf, err := Aggregate(users)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = AppendAggregate(buf[:0], users); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
