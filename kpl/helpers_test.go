package kpl

import (
	"crypto/md5"

	"google.golang.org/protobuf/encoding/protowire"
)

// frame wraps protobuf bytes in the magic bytes and their MD5.
func frame(body []byte) []byte {
	b := append([]byte(Magic), body...)
	sum := md5.Sum(body)
	return append(b, sum[:]...)
}

// pbBytes appends one length-delimited field.
func pbBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// pbVarint appends one varint field.
func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// pbRecord is one Record message: partition key index pk and data d.
func pbRecord(pk uint64, d string) []byte {
	return pbBytes(pbVarint(nil, fieldPartitionKeyIndex, pk), fieldData, []byte(d))
}

// body returns the protobuf bytes of an aggregated record.
func body(agg []byte) []byte { return agg[len(Magic) : len(agg)-trailerSize] }
