package kpl

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
)

// HashKey is an unsigned 128-bit Kinesis hash key: Hi*2^64 + Lo. A shard
// holds the records whose hash keys are in its range; the zero HashKey is
// 0. HashKeys compare with == and [HashKey.Compare].
type HashKey struct {
	Hi, Lo uint64
}

// PartitionKeyHash returns the hash key Kinesis gives a partition key: the
// MD5 of its UTF-8 bytes read as a big-endian 128-bit number.
func PartitionKeyHash(partitionKey string) HashKey {
	return hashKeyOfMD5(md5.Sum([]byte(partitionKey))) // no allocation: the conversion does not escape
}

// hashKeyOfMD5 reads an MD5 sum as a big-endian number.
func hashKeyOfMD5(sum [md5.Size]byte) HashKey {
	return HashKey{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:])}
}

// ParseHashKey parses a hash key as Kinesis writes it: a decimal number in
// [0, 2^128-1], 1 to 39 digits, no sign.
func ParseHashKey(s string) (HashKey, error) {
	k, ok := parseHashKey(s)
	if !ok {
		if len(s) > 50 {
			s = s[:50] + "..."
		}
		return HashKey{}, fmt.Errorf("kpl: hash key %q is not a decimal number in [0, 2^128-1]", s)
	}
	return k, nil
}

// parseHashKey is ParseHashKey without an error to allocate.
func parseHashKey(s string) (HashKey, bool) {
	if len(s) == 0 || len(s) > 39 {
		return HashKey{}, false
	}
	var hi, lo uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return HashKey{}, false
		}
		// (hi, lo) = (hi, lo)*10 + c
		hiHi, hiLo := bits.Mul64(hi, 10)
		loHi, loLo := bits.Mul64(lo, 10)
		h, carry := bits.Add64(hiLo, loHi, 0)
		if hiHi != 0 || carry != 0 {
			return HashKey{}, false
		}
		l, carry := bits.Add64(loLo, uint64(c-'0'), 0)
		h, carry = bits.Add64(h, 0, carry)
		if carry != 0 {
			return HashKey{}, false
		}
		hi, lo = h, l
	}
	return HashKey{hi, lo}, true
}

// Compare returns -1, 0 or +1 as k is less than, equal to or greater than
// o.
func (k HashKey) Compare(o HashKey) int {
	switch {
	case k.Hi < o.Hi || (k.Hi == o.Hi && k.Lo < o.Lo):
		return -1
	case k == o:
		return 0
	}
	return +1
}

// String returns k in decimal, as Kinesis writes hash keys.
func (k HashKey) String() string {
	hi, lo := k.Hi, k.Lo
	if hi == 0 {
		return strconv.FormatUint(lo, 10)
	}
	var buf [39]byte
	i := len(buf)
	for hi != 0 || lo != 0 {
		var r uint64
		hi, r = bits.Div64(0, hi, 10)
		lo, r = bits.Div64(r, lo, 10)
		i--
		buf[i] = byte('0' + r)
	}
	return string(buf[i:])
}

// BigInt returns k as a new big.Int.
func (k HashKey) BigInt() *big.Int {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.Hi)
	binary.BigEndian.PutUint64(b[8:], k.Lo)
	return new(big.Int).SetBytes(b[:])
}
