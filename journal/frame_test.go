package journal

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wantFrame builds a frame independently of appendFrame: the length word,
// the CRC-32C of data followed by the little-endian index, the index, the
// data and zero padding.
func wantFrame(word uint64, index uint64, data string, pad int) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, word)
	idx := binary.LittleEndian.AppendUint64(nil, index)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(append([]byte(data), idx...), crc32.MakeTable(crc32.Castagnoli)))
	b = append(b, idx...)
	b = append(b, data...)
	return append(b, make([]byte, pad)...)
}

func TestAppendFrame(t *testing.T) {
	tests := []struct {
		index uint64
		data  string
		want  []byte
	}{
		{1, "", wantFrame(0x84<<56|12, 1, "", 4)},
		{2, "a", wantFrame(0x83<<56|13, 2, "a", 3)},
		{3, "abcd", wantFrame(0x80<<56|16, 3, "abcd", 0)},
		{1<<64 - 1, "abcdefghijk", wantFrame(0x81<<56|23, 1<<64-1, "abcdefghijk", 1)},
	}
	for _, tt := range tests {
		got := appendFrame([]byte("prefix"), tt.index, []byte(tt.data))
		if diff := cmp.Diff(append([]byte("prefix"), tt.want...), got); diff != "" {
			t.Errorf("appendFrame(%d, %q) (-want +got):\n%s", tt.index, tt.data, diff)
		}
		if int64(len(tt.want)) != frameSize(len(tt.data)) || len(tt.want)%8 != 0 {
			t.Errorf("frameSize(%d) = %d, encoded %d bytes", len(tt.data), frameSize(len(tt.data)), len(tt.want))
		}
	}
}

func TestDecodeFrame(t *testing.T) {
	good := appendFrame(nil, 7, []byte("hello"))
	two := appendFrame(appendFrame(nil, 1, []byte("x")), 2, []byte("y"))
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	type result struct {
		Index uint64
		Data  string
		N     int
		Prob  problem
	}
	tests := []struct {
		name string
		in   []byte
		want result
		msg  string
	}{
		{"valid", good, result{7, "hello", 32, 0}, ""},
		{"first of two", two, result{1, "x", 24, 0}, ""},
		{"empty", nil, result{Prob: probShort}, "0 bytes left, a length word needs 8"},
		{"7 bytes", good[:7], result{Prob: probShort}, "7 bytes left, a length word needs 8"},
		{"zero word", make([]byte, 32), result{Prob: probZero}, "zero length word"},
		{"no marker", mod(func(b []byte) []byte { b[7] = 0x03; return b }), result{Prob: probBadWord}, "top byte 0x03 is not 0x80|padding"},
		{"padding above 7", mod(func(b []byte) []byte { b[7] = 0x8b; return b }), result{Prob: probBadWord}, "top byte 0x8b is not 0x80|padding"},
		{"body below header", mod(func(b []byte) []byte { b[0] = 11; b[7] = 0x85; return b }), result{Prob: probBadWord}, "body length 11 is below 12"},
		{"padding mismatch", mod(func(b []byte) []byte { b[7] = 0x82; return b }), result{Prob: probBadWord}, "padding 2 does not align body length 17"},
		{"cut short", good[:31], result{Prob: probPastEnd}, "frame body of 17 bytes (+7 padding) but only 23 bytes left"},
		{"huge length", mod(func(b []byte) []byte { binary.LittleEndian.PutUint64(b, 0x80<<56|1<<48); return b }), result{Prob: probPastEnd}, "frame body of 281474976710656 bytes (+0 padding) but only 24 bytes left"},
		{"crc", mod(func(b []byte) []byte { b[20] ^= 1; return b }), result{Prob: probChecksum}, "CRC-32C mismatch"},
		{"index", mod(func(b []byte) []byte { b[12] ^= 1; return b }), result{Prob: probChecksum}, "CRC-32C mismatch"},
		{"non-zero padding", mod(func(b []byte) []byte { b[31] = 1; return b }), result{Prob: probPadding}, "non-zero padding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			index, data, n, ferr := decodeFrame(tt.in)
			got := result{index, string(data), n, 0}
			msg := ""
			if ferr != nil {
				got.Prob, msg = ferr.prob, ferr.msg
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeFrame (-want +got):\n%s", diff)
			}
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q, want it to contain %q", msg, tt.msg)
			}
		})
	}
}

// TestFrameReaderChecksLengthFirst feeds a length word claiming far more
// than the input holds: the reader refuses it without allocating.
func TestFrameReaderChecksLengthFirst(t *testing.T) {
	in := binary.LittleEndian.AppendUint64(nil, 0x80<<56|1<<40)
	in = append(in, make([]byte, 8)...)
	fr := &frameReader{r: bytes.NewReader(in), size: int64(len(in))}
	_, _, err := fr.next()
	fe, ok := err.(*frameError)
	if !ok || fe.prob != probPastEnd {
		t.Fatalf("next() = %v, want a past-the-end frame error", err)
	}
	if cap(fr.buf) != 0 {
		t.Errorf("the reader allocated %d bytes for a frame longer than its input", cap(fr.buf))
	}
}

func TestFileNames(t *testing.T) {
	tests := []struct {
		n    fileName
		want string
	}{
		{fileName{kind: kindSegment, seq: 0, index: 1}, "0000000000000000-0000000000000001.seg"},
		{fileName{kind: kindSegment, seq: 0xab, index: 1<<64 - 1}, "00000000000000ab-ffffffffffffffff.seg"},
		{fileName{kind: kindSnapshot, index: 0}, "0000000000000000.snap"},
		{fileName{kind: kindSnapshot, index: 0x1234}, "0000000000001234.snap"},
	}
	for _, tt := range tests {
		if got := tt.n.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.n, got, tt.want)
		}
		if got, ok := parseFileName(tt.want); !ok || got != tt.n {
			t.Errorf("parseFileName(%q) = %+v, %v; want %+v", tt.want, got, ok, tt.n)
		}
	}
	for _, bad := range []string{
		"LOCK", "0000000000000000-0000000000000001.seg.tmp", "0000000000000000.snap.corrupt-20260101T000000.000000000Z",
		"000000000000000-0000000000000001.seg", "0000000000000000_0000000000000001.seg", "000000000000000A-0000000000000001.seg",
		"000000000000000g.snap", "00000000000000000.snap", ".snap", ".seg", "0000000000000000-0000000000000001.snap",
	} {
		if n, ok := parseFileName(bad); ok {
			t.Errorf("parseFileName(%q) = %+v, want not a journal file", bad, n)
		}
	}
}

// FuzzDecodeFrame checks that decoding never panics, never allocates for
// a frame longer than the input, and that whatever decodes re-encodes to
// the same bytes. The seeds are in testdata/fuzz/FuzzDecodeFrame.
func FuzzDecodeFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		index, data, n, ferr := decodeFrame(b)
		fr := &frameReader{r: bytes.NewReader(b), size: int64(len(b))}
		rIndex, rData, rErr := fr.next()
		if ferr == nil {
			if n <= 0 || n > len(b) || n%8 != 0 {
				t.Fatalf("decoded a %d-byte frame from %d bytes", n, len(b))
			}
			if re := appendFrame(nil, index, data); !bytes.Equal(re, b[:n]) {
				t.Fatalf("re-encoding index %d data %q gives %x, decoded from %x", index, data, re, b[:n])
			}
			if rErr != nil || rIndex != index || !bytes.Equal(rData, data) || fr.off != int64(n) {
				t.Fatalf("frameReader disagrees: (%d, %q, %v, off %d), decodeFrame (%d, %q, n %d)", rIndex, rData, rErr, fr.off, index, data, n)
			}
		} else {
			var rfe *frameError
			if e, ok := rErr.(*frameError); ok {
				rfe = e
			}
			if len(b) > 0 && (rfe == nil || rfe.prob != ferr.prob) {
				t.Fatalf("frameReader error %v, decodeFrame error %v", rErr, ferr)
			}
		}
		for rErr == nil {
			_, _, rErr = fr.next()
		}
		if cap(fr.buf) > len(b) {
			t.Fatalf("frameReader allocated %d bytes for a %d-byte input", cap(fr.buf), len(b))
		}
	})
}

var writeSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite testdata/fuzz/FuzzDecodeFrame")

// TestWriteFuzzSeeds rewrites the committed seed corpus when run with
// -write-fuzz-seeds; otherwise it checks that the committed seeds are the
// ones it would write.
func TestWriteFuzzSeeds(t *testing.T) {
	good := appendFrame(nil, 7, []byte("hello"))
	flip := func(i int, x byte) []byte { b := append([]byte{}, good...); b[i] ^= x; return b }
	seeds := map[string][]byte{
		"empty-record":     appendFrame(nil, 1, nil),
		"one-byte":         appendFrame(nil, 2, []byte("a")),
		"aligned":          appendFrame(nil, 3, []byte("abcd")),
		"max-index":        appendFrame(nil, 1<<64-1, []byte("abcdefghijk")),
		"two-frames":       appendFrame(appendFrame(nil, 1, []byte("x")), 2, []byte("yz")),
		"trailing-garbage": append(appendFrame(nil, 9, []byte("tail")), 1, 2, 3),
		"cut-short":        good[:len(good)-3],
		"short-word":       good[:5],
		"zero-word":        make([]byte, 24),
		"bad-marker":       flip(7, 0x80),
		"huge-length":      binary.LittleEndian.AppendUint64(append([]byte{}, make([]byte, 0)...), 0x80<<56|1<<55),
		"bad-crc":          flip(9, 0x40),
		"bad-padding":      flip(len(good)-1, 0x01),
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	for name, b := range seeds {
		writeOrCheckSeed(t, filepath.Join(dir, name), fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b), "TestWriteFuzzSeeds")
	}
}

// writeOrCheckSeed writes a fuzz seed file at path with content when run
// with -write-fuzz-seeds; otherwise it reports an error unless the
// committed file holds exactly content (test names the test that
// rewrites it).
func writeOrCheckSeed(t *testing.T, path, content, test string) {
	t.Helper()
	if *writeSeeds {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != content {
		t.Errorf("seed %s is missing or stale (err %v); run go test -run %s -write-fuzz-seeds", path, err, test)
	}
}
