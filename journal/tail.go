package journal

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// The recovery rules. Every segment but the newest was sealed when the
// next one was created (its last batch was synced first), so any damage in
// it is a hard error. In the newest segment only the last write of a crash
// can be incomplete, and that write is one batch: the last one. A crash
// leaves the bytes of that batch either as written or missing, where
// missing means the file ends early or a 512-byte sector reads as zeros.
// So the newest segment's tail is torn, and truncated by Open, exactly
// when the first bad thing in it is explained by that:
//
//   - fewer bytes than a batch header are left;
//   - a valid header's batch runs past the end of the file;
//   - a header does not check, its bytes overlap a zero sector (or the end
//     of the file), and no valid batch header follows anywhere after it;
//   - a batch that ends exactly at the end of the file fails its checks,
//     and its payload has more zero sectors than its header says it had
//     when written.
//
// Anything else is a hard error naming the file and the offset of the
// first bad header or frame: a length that failed its checksum is never
// trusted, and a cut never removes a valid batch.

// checkSegment reads st.segs[pos] through, sets its size, last and
// lastWrite, and reports damage. isLast marks the newest segment, whose
// torn tail sets st.torn.
func checkSegment(st *dirState, pos int, isLast bool) (*damage, error) {
	seg := &st.segs[pos]
	data, err := os.ReadFile(seg.path)
	if err != nil {
		return nil, fmt.Errorf("journal: read segment %s: %w", seg.path, err)
	}
	seg.fileSize = int64(len(data))
	seg.size = 0
	bad := func(off int64, why string) (*damage, error) {
		return &damage{err: &CorruptError{File: seg.path, Offset: off, Reason: why}, seg: pos, cut: off, batchAt: -1}, nil
	}
	var magic [8]byte
	copy(magic[:], data)
	switch {
	case len(data) >= len(magic) && magic == segmentMagic:
	case len(data) >= len(magic) && magic == segmentMagicV1:
		seg.v1 = true
	case len(data) >= len(magic) && [7]byte(magic[:7]) == [7]byte(segmentMagic[:7]) && magic[7] > segmentMagic[7]:
		return nil, fmt.Errorf("%w: %s at offset 7: segment format version %d, this build reads up to %d",
			ErrNewerFormat, seg.path, magic[7], segmentMagic[7])
	default:
		return bad(0, "not a segment file: bad magic")
	}
	seg.size = int64(len(magic))
	torn := func(why string) (*damage, error) {
		st.torn, st.tornWhy = true, why
		return nil, nil
	}
	if seg.v1 {
		off, last, why, ferr := scanV1(data, seg.name.index)
		seg.size, seg.last = off, last
		if ferr == nil {
			return nil, nil
		}
		if isLast && why != "" {
			return torn(why)
		}
		return bad(off, ferr.msg)
	}

	want := seg.name.index
	off := seg.size
	defer func() { seg.last = want - 1 }()
	for off < int64(len(data)) {
		rest := data[off:]
		if len(rest) < batchHeaderSize {
			if isLast {
				return torn(fmt.Sprintf("short tail of %d bytes at offset %d", len(rest), off))
			}
			return bad(off, fmt.Sprintf("%d bytes left, a batch header needs %d", len(rest), batchHeaderSize))
		}
		h, herr := parseBatchHeader(rest)
		if herr != nil {
			if isLast && zeroSectorIn(data, off, off, off+batchHeaderSize) && !validHeaderAfter(data, off) {
				return torn(fmt.Sprintf("last batch torn at offset %d: %v", off, herr))
			}
			return bad(off, herr.Error())
		}
		if h.first != want {
			return bad(off, fmt.Sprintf("batch starts at record index %d, want %d", h.first, want))
		}
		end := off + batchHeaderSize + h.payloadLen
		if end > int64(len(data)) {
			if isLast {
				return torn(fmt.Sprintf("last batch cut short at offset %d: %d of its %d bytes are in the file",
					off, int64(len(data))-off, end-off))
			}
			return bad(off, fmt.Sprintf("batch of %d bytes runs past the end of the segment (%d bytes left)", end-off, int64(len(data))-off))
		}
		if badAt, perr := checkPayload(data[off+batchHeaderSize:end], h); perr != nil {
			frame := off + batchHeaderSize + badAt
			if isLast && end == int64(len(data)) && zeroSectors(data, off+batchHeaderSize, end) > h.zeroSectors {
				return torn(fmt.Sprintf("last batch torn at offset %d: %v", off, perr))
			}
			d, _ := bad(frame, perr.Error())
			d.batchAt = off
			return d, nil
		}
		want += uint64(h.count)
		off = end
		seg.size = off
		seg.lastWrite = h.unixNano
	}
	return nil, nil
}

// zeroSectorIn tells whether any 512-byte sector (by file offset) that
// overlaps [from, to) is zero from max(sector start, base) to
// min(sector end, end of file): a sector that a crash kept from the disk.
// base is where the last write began; bytes before it were durable.
func zeroSectorIn(data []byte, base, from, to int64) bool {
	size := int64(len(data))
	to = min(to, size)
	if from >= size {
		return true // the range starts past the end of the file: cut short
	}
	for s := from / sectorSize * sectorSize; s < to; s += sectorSize {
		lo, hi := max(s, base), min(s+sectorSize, size)
		if lo < hi && isZero(data[lo:hi]) {
			return true
		}
	}
	return false
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// validHeaderAfter tells whether a batch header that checks starts at any
// 8-byte aligned offset after off: if one does, the bad header at off is
// not the last write.
func validHeaderAfter(data []byte, off int64) bool {
	for p := off + wordSize; p+batchHeaderSize <= int64(len(data)); p += wordSize {
		if data[p+7] != batchMarker {
			continue // cheap filter: the top byte of the header word
		}
		if _, err := parseBatchHeader(data[p:]); err == nil {
			return true
		}
	}
	return false
}

// scanV1 reads the frames of a first-format segment from offset 8. It
// returns where the valid frames end, the last index, and for a bad frame
// its error and, when the bad frame can be a torn last write, why. A v1
// frame is torn only when no valid frame of a later record follows it at
// any aligned offset: the bad frame's own length, which failed its checks,
// is not used.
func scanV1(data []byte, first uint64) (end int64, last uint64, tornWhy string, ferr *frameError) {
	off := int64(len(segmentMagicV1))
	want := first
	for off < int64(len(data)) {
		index, _, n, err := decodeFrame(data[off:])
		if err == nil && index != want {
			err = &frameError{prob: probChecksum, msg: fmt.Sprintf("record index %d, want %d", index, want)}
		}
		if err != nil {
			if !laterFrameV1(data, off, want) {
				tornWhy = fmt.Sprintf("torn last frame at offset %d: %s", off, err.msg)
			}
			return off, want - 1, tornWhy, err
		}
		want++
		off += int64(n)
	}
	return off, want - 1, "", nil
}

// laterFrameV1 tells whether a valid frame with an index above want starts
// at an 8-byte aligned offset after off.
func laterFrameV1(data []byte, off int64, want uint64) bool {
	for p := off + wordSize; p+wordSize <= int64(len(data)); p += wordSize {
		if i, _, _, err := decodeFrame(data[p:]); err == nil && i > want {
			return true
		}
	}
	return false
}

// recordReader reads the records of one segment file sequentially, for
// Replay: batches in a v2 segment, bare frames in a v1 segment. Load has
// checked the file; the reader checks every frame again.
type recordReader struct {
	fr   frameReader
	v1   bool
	left int64 // payload bytes left in the current batch
	hdr  [batchHeaderSize]byte
}

// newRecordReader reads f's records from after its magic up to size.
func newRecordReader(f *os.File, size int64, v1 bool) (*recordReader, error) {
	if _, err := f.Seek(int64(len(segmentMagic)), io.SeekStart); err != nil {
		return nil, fmt.Errorf("journal: read segment %s: %w", f.Name(), err)
	}
	return &recordReader{fr: frameReader{r: bufio.NewReaderSize(f, 64<<10), off: int64(len(segmentMagic)), size: size}, v1: v1}, nil
}

// offset returns the offset of the next thing read.
func (rr *recordReader) offset() int64 { return rr.fr.off }

// next returns the next record, or io.EOF after the last.
func (rr *recordReader) next() (index uint64, data []byte, err error) {
	if !rr.v1 && rr.left == 0 {
		left := rr.fr.size - rr.fr.off
		if left == 0 {
			return 0, nil, io.EOF
		}
		if left < batchHeaderSize {
			return 0, nil, &frameError{prob: probShort, msg: fmt.Sprintf("%d bytes left, a batch header needs %d", left, batchHeaderSize)}
		}
		if _, err := io.ReadFull(rr.fr.r, rr.hdr[:]); err != nil {
			return 0, nil, err
		}
		h, herr := parseBatchHeader(rr.hdr[:])
		if herr != nil {
			return 0, nil, &frameError{prob: probBadWord, msg: herr.Error()}
		}
		if h.payloadLen > left-batchHeaderSize {
			return 0, nil, &frameError{prob: probPastEnd, msg: fmt.Sprintf("batch of %d bytes but only %d bytes left", h.payloadLen, left-batchHeaderSize)}
		}
		rr.fr.off += batchHeaderSize
		rr.left = h.payloadLen
	}
	start := rr.fr.off
	index, data, err = rr.fr.next()
	if err != nil || rr.v1 {
		return index, data, err
	}
	rr.left -= rr.fr.off - start
	if rr.left < 0 {
		return 0, nil, &frameError{prob: probPastEnd, msg: "frame runs past the end of its batch"}
	}
	return index, data, nil
}
