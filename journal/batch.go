package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A version-2 segment is a sequence of batches: one batch per write and
// fsync of the writer (a group commit). A batch is a header followed by
// its payload, the frames of its records:
//
//	offset  size  field
//	0       8     word: top byte batchMarker, low 56 bits the payload length
//	8       8     index of the batch's first record
//	16      4     number of records
//	20      4     CRC-32C of the payload
//	24      8     write time, Unix nanoseconds of the writer's clock
//	32      4     CRC-32C of bytes 0 to 31 and 36 to 39
//	36      4     number of zero sectors in the payload
//
// The header makes the unit of durability explicit: a batch is whole (its
// payload checks against the header) or it is the torn last write of a
// crash (see tail.go). The zero-sector count is what tells a crash from
// damage: a crash that kept part of the write from the disk leaves more
// 512-byte sectors of zeros in the payload than it had when written (the
// sectors are counted by file offset, clipped to the payload); a flipped
// bit or a garbled byte never adds one.
const (
	batchHeaderSize = 40
	batchMarker     = 0xC0
)

// batchHeader is a decoded batch header.
type batchHeader struct {
	payloadLen int64
	first      uint64
	count      uint32
	payloadCRC uint32
	unixNano   int64
	// zeroSectors is the number of 512-byte sectors (by file offset,
	// clipped to the payload) that were all zero when written.
	zeroSectors uint32
}

// putBatchHeader writes h into dst[:batchHeaderSize].
func putBatchHeader(dst []byte, h batchHeader) {
	binary.LittleEndian.PutUint64(dst[0:], uint64(h.payloadLen)|uint64(batchMarker)<<56)
	binary.LittleEndian.PutUint64(dst[8:], h.first)
	binary.LittleEndian.PutUint32(dst[16:], h.count)
	binary.LittleEndian.PutUint32(dst[20:], h.payloadCRC)
	binary.LittleEndian.PutUint64(dst[24:], uint64(h.unixNano))
	binary.LittleEndian.PutUint32(dst[36:], h.zeroSectors)
	binary.LittleEndian.PutUint32(dst[32:], headerCRC(dst))
}

// headerCRC is the CRC-32C of a header's bytes but its own field.
func headerCRC(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:32], crcTable), crcTable, b[36:40])
}

// parseBatchHeader decodes the header at the start of b, which must hold
// at least batchHeaderSize bytes. It checks the marker, the header's CRC
// and that the payload length is a whole number of 8-byte words.
func parseBatchHeader(b []byte) (batchHeader, error) {
	word := binary.LittleEndian.Uint64(b)
	if top := byte(word >> 56); top != batchMarker {
		return batchHeader{}, fmt.Errorf("batch header word %#016x: top byte %#02x, want %#02x", word, top, batchMarker)
	}
	if got, want := headerCRC(b), binary.LittleEndian.Uint32(b[32:]); got != want {
		return batchHeader{}, fmt.Errorf("batch header CRC-32C mismatch: stored %#08x, computed %#08x", want, got)
	}
	h := batchHeader{
		payloadLen:  int64(word & lenMask),
		first:       binary.LittleEndian.Uint64(b[8:]),
		count:       binary.LittleEndian.Uint32(b[16:]),
		payloadCRC:  binary.LittleEndian.Uint32(b[20:]),
		unixNano:    int64(binary.LittleEndian.Uint64(b[24:])),
		zeroSectors: binary.LittleEndian.Uint32(b[36:]),
	}
	if h.payloadLen%8 != 0 {
		return batchHeader{}, fmt.Errorf("batch header: payload length %d is not a multiple of 8", h.payloadLen)
	}
	if h.count == 0 || h.payloadLen < int64(h.count)*(wordSize+bodyHeaderSize) {
		return batchHeader{}, fmt.Errorf("batch header: %d records cannot fill a payload of %d bytes", h.count, h.payloadLen)
	}
	return h, nil
}

// checkPayload checks a batch payload against its header: its CRC, then
// that it holds exactly h.count frames with consecutive indexes from
// h.first. On failure it returns the offset in payload of the first bad
// frame (0 for a CRC mismatch found before any frame was decoded).
func checkPayload(payload []byte, h batchHeader) (badAt int64, err error) {
	crcOK := crc32.Checksum(payload, crcTable) == h.payloadCRC
	off := 0
	for i := uint32(0); i < h.count; i++ {
		index, _, n, ferr := decodeFrame(payload[off:])
		if ferr != nil {
			return int64(off), fmt.Errorf("record %d: %s", h.first+uint64(i), ferr.msg)
		}
		if want := h.first + uint64(i); index != want {
			return int64(off), fmt.Errorf("record index %d, want %d", index, want)
		}
		off += n
	}
	if off != len(payload) {
		return int64(off), fmt.Errorf("%d bytes after the batch's %d records", len(payload)-off, h.count)
	}
	if !crcOK {
		return 0, fmt.Errorf("batch payload CRC-32C mismatch (every frame checks: damage in padding?)")
	}
	return 0, nil
}

// zeroSectors counts the 512-byte sectors, by file offset, that overlap
// [from, to) of data and are all zero within it.
func zeroSectors(data []byte, from, to int64) uint32 {
	n := uint32(0)
	for s := from / sectorSize * sectorSize; s < to; s += sectorSize {
		lo, hi := max(s, from), min(s+sectorSize, to)
		if isZero(data[lo:hi]) {
			n++
		}
	}
	return n
}

// zeroSectorsAt counts the zero sectors of payload as it will lie in the
// file from offset at.
func zeroSectorsAt(payload []byte, at int64) uint32 {
	n := uint32(0)
	for s := at / sectorSize * sectorSize; s < at+int64(len(payload)); s += sectorSize {
		lo, hi := max(s, at)-at, min(s+sectorSize, at+int64(len(payload)))-at
		if isZero(payload[lo:hi]) {
			n++
		}
	}
	return n
}
