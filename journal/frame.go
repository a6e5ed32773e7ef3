package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame layout (see the package doc): an 8-byte length word, then a body of
// bodyLen bytes (CRC-32C, index, data), then pad zero bytes so that the
// frame ends on an 8-byte boundary.
const (
	wordSize       = 8
	bodyHeaderSize = 4 + 8 // CRC-32C, index
	lenMask        = 1<<56 - 1
	wordMarker     = 0x80
	sectorSize     = 512
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// padding returns the number of zero bytes that align n to 8.
func padding(n int64) int64 { return (8 - n%8) % 8 }

// frameSize returns the encoded size of a frame holding dataLen bytes.
func frameSize(dataLen int) int64 {
	b := int64(bodyHeaderSize + dataLen)
	return wordSize + b + padding(b)
}

// appendFrame appends the frame of one record (or snapshot) to dst.
func appendFrame(dst []byte, index uint64, data []byte) []byte {
	bodyLen := int64(bodyHeaderSize + len(data))
	pad := padding(bodyLen)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(bodyLen)|uint64(wordMarker|pad)<<56)
	dst = binary.LittleEndian.AppendUint32(dst, frameCRC(crc32.Checksum(data, crcTable), index))
	dst = binary.LittleEndian.AppendUint64(dst, index)
	dst = append(dst, data...)
	var zeros [8]byte
	return append(dst, zeros[:pad]...)
}

// frameCRC extends dataCRC, the CRC-32C of a record's data, with its index.
func frameCRC(dataCRC uint32, index uint64) uint32 {
	var idx [8]byte
	binary.LittleEndian.PutUint64(idx[:], index)
	return crc32.Update(dataCRC, crcTable, idx[:])
}

// problem classifies what is wrong with a frame.
type problem int

const (
	probShort    problem = iota + 1 // fewer than 8 bytes left for the length word
	probZero                        // the length word is zero
	probBadWord                     // the length word is malformed
	probPastEnd                     // the frame is longer than the bytes left
	probChecksum                    // CRC-32C mismatch
	probPadding                     // padding bytes are not zero
)

// frameError is a malformed frame. The decoders return it; callers turn it
// into a torn-tail truncation or a *CorruptError.
type frameError struct {
	prob    problem
	bodyLen int64 // from the length word, when it parsed
	msg     string
}

func (e *frameError) Error() string { return e.msg }

// parseWord checks a length word and returns the body length and padding.
func parseWord(word uint64) (bodyLen, pad int64, err *frameError) {
	if word == 0 {
		return 0, 0, &frameError{prob: probZero, msg: "zero length word"}
	}
	top := byte(word >> 56)
	bodyLen = int64(word & lenMask)
	pad = int64(top &^ wordMarker)
	if top&wordMarker == 0 || pad > 7 {
		return 0, 0, &frameError{prob: probBadWord, msg: fmt.Sprintf("length word %#016x: top byte %#02x is not 0x80|padding", word, top)}
	}
	if bodyLen < bodyHeaderSize {
		return 0, 0, &frameError{prob: probBadWord, msg: fmt.Sprintf("length word %#016x: body length %d is below %d", word, bodyLen, bodyHeaderSize)}
	}
	if padding(bodyLen) != pad {
		return 0, 0, &frameError{prob: probBadWord, msg: fmt.Sprintf("length word %#016x: padding %d does not align body length %d", word, pad, bodyLen)}
	}
	return bodyLen, pad, nil
}

// checkBody checks a body followed by its padding and returns the index and
// data, which alias body.
func checkBody(body []byte, bodyLen int64) (index uint64, data []byte, err *frameError) {
	for _, b := range body[bodyLen:] {
		if b != 0 {
			return 0, nil, &frameError{prob: probPadding, bodyLen: bodyLen, msg: "non-zero padding"}
		}
	}
	want := binary.LittleEndian.Uint32(body)
	index = binary.LittleEndian.Uint64(body[4:])
	data = body[bodyHeaderSize:bodyLen]
	if got := frameCRC(crc32.Checksum(data, crcTable), index); got != want {
		return 0, nil, &frameError{prob: probChecksum, bodyLen: bodyLen, msg: fmt.Sprintf("CRC-32C mismatch: stored %#08x, computed %#08x", want, got)}
	}
	return index, data, nil
}

// decodeFrame decodes the frame at the start of b. It allocates nothing:
// data aliases b. n is the frame's encoded size.
func decodeFrame(b []byte) (index uint64, data []byte, n int, err *frameError) {
	if len(b) < wordSize {
		return 0, nil, 0, &frameError{prob: probShort, msg: fmt.Sprintf("%d bytes left, a length word needs 8", len(b))}
	}
	bodyLen, pad, ferr := parseWord(binary.LittleEndian.Uint64(b))
	if ferr != nil {
		return 0, nil, 0, ferr
	}
	left := int64(len(b) - wordSize)
	if bodyLen+pad > left {
		return 0, nil, 0, pastEnd(bodyLen, pad, left)
	}
	index, data, ferr = checkBody(b[wordSize:wordSize+bodyLen+pad], bodyLen)
	if ferr != nil {
		return 0, nil, 0, ferr
	}
	return index, data, int(wordSize + bodyLen + pad), nil
}

func pastEnd(bodyLen, pad, left int64) *frameError {
	return &frameError{prob: probPastEnd, bodyLen: bodyLen, msg: fmt.Sprintf("frame body of %d bytes (+%d padding) but only %d bytes left", bodyLen, pad, left)}
}

// frameReader reads the frames of a file sequentially. It checks each
// length word against the bytes left before it allocates, so it never
// allocates more than the file holds.
type frameReader struct {
	r    io.Reader
	off  int64 // offset of the next frame
	size int64 // where the frames end
	buf  []byte
	word [wordSize]byte
}

// next returns the next frame. At size it returns io.EOF. A malformed
// frame is a *frameError; an I/O failure is returned as it is. After an
// error, next must not be called again. data is valid until the next call.
func (fr *frameReader) next() (index uint64, data []byte, err error) {
	left := fr.size - fr.off
	if left == 0 {
		return 0, nil, io.EOF
	}
	if left < wordSize {
		return 0, nil, &frameError{prob: probShort, msg: fmt.Sprintf("%d bytes left, a length word needs 8", left)}
	}
	if _, err := io.ReadFull(fr.r, fr.word[:]); err != nil {
		return 0, nil, err
	}
	bodyLen, pad, ferr := parseWord(binary.LittleEndian.Uint64(fr.word[:]))
	if ferr != nil {
		return 0, nil, ferr
	}
	if bodyLen+pad > left-wordSize {
		return 0, nil, pastEnd(bodyLen, pad, left-wordSize)
	}
	n := int(bodyLen + pad)
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	body := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, body); err != nil {
		return 0, nil, err
	}
	index, data, ferr = checkBody(body, bodyLen)
	if ferr != nil {
		return 0, nil, ferr
	}
	fr.off += wordSize + int64(n)
	return index, data, nil
}
