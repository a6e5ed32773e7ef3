package kpl

import (
	"crypto/md5"
	"math/big"
	"strings"
	"testing"
)

var maxHashKey = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

// ParseHashKey reads decimal numbers in [0, 2^128-1], and String writes
// them back, as big.Int does.
func TestParseHashKey(t *testing.T) {
	for _, s := range []string{"0", "1", "9", "10", "18446744073709551615", "18446744073709551616", "170141183460469231731687303715884105728",
		"340282366920938463463374607431768211454", maxHashKey.String()} {
		k, err := ParseHashKey(s)
		if err != nil || k.String() != s || k.BigInt().String() != s {
			t.Errorf("ParseHashKey(%s) = %s (big.Int %s), %v", s, k, k.BigInt(), err)
		}
	}
	over := new(big.Int).Add(maxHashKey, big.NewInt(1)).String()
	for _, s := range []string{"", "-1", "+1", "1a", " 1", "1.0", over, strings.Repeat("9", 39), strings.Repeat("1", 40), strings.Repeat("0", 40)} {
		if k, err := ParseHashKey(s); err == nil {
			t.Errorf("ParseHashKey(%q) = %s, want an error", s, k)
		}
	}
	// Leading zeros are digits like any other, up to 39 of them.
	if k, err := ParseHashKey("007"); err != nil || k != (HashKey{0, 7}) {
		t.Errorf("ParseHashKey(007) = %s, %v; want 7", k, err)
	}
}

// The hash key of a partition key is its MD5 read as a big-endian number.
func TestPartitionKeyHashIsMD5BigEndian(t *testing.T) {
	for _, pk := range []string{"e", "", "ключ-日本", strings.Repeat("long key ", 30)} {
		sum := md5.Sum([]byte(pk))
		want := new(big.Int).SetBytes(sum[:])
		if k := PartitionKeyHash(pk); k.String() != want.String() {
			t.Errorf("PartitionKeyHash(%q) = %s, want %s", pk, k, want)
		}
	}
}

// Compare orders hash keys as numbers, across the 64-bit halves.
func TestHashKeyCompareOrdersNumbers(t *testing.T) {
	keys := []string{"0", "1", "18446744073709551615", "18446744073709551616", "18446744073709551617", "36893488147419103232", maxHashKey.String()}
	for i, a := range keys {
		for j, b := range keys {
			ka, _ := ParseHashKey(a)
			kb, _ := ParseHashKey(b)
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ka.Compare(kb); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// A user record's hash key is its explicit hash key if it has one, else
// its partition key's MD5.
func TestUserRecordHashKey(t *testing.T) {
	if k, ok := (UserRecord{PartitionKey: "a"}).HashKey(); !ok || k != PartitionKeyHash("a") {
		t.Errorf("no explicit hash key: %s, %v; want the MD5 of a", k, ok)
	}
	if k, ok := (UserRecord{PartitionKey: "a", ExplicitHashKey: "42"}).HashKey(); !ok || k != (HashKey{0, 42}) {
		t.Errorf("explicit 42: %s, %v", k, ok)
	}
	if k, ok := (UserRecord{PartitionKey: "a", ExplicitHashKey: "-1"}).HashKey(); ok {
		t.Errorf("explicit -1: %s, ok; want not ok", k)
	}
}
