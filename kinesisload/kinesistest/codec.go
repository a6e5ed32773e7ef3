package kinesistest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// Shard iterators and ListShards NextTokens are opaque base64 strings that
// carry their own state, signed with the fake's key so that a forged or
// altered one is refused.

const (
	kindIterator  byte = 1
	kindNextToken byte = 2
	macLen             = 16
)

var errMalformed = errors.New("kinesistest: malformed token")

type iterator struct {
	streamID uint64
	stream   string
	shard    int
	from     uint64 // first sequence counter the iterator may return
	issued   time.Time
}

type nextToken struct {
	streamID   uint64
	stream     string
	after      int // shards listed so far end with this index
	filterType string
	filterTime time.Time
	issued     time.Time
}

type writer struct{ b []byte }

func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) str(s string) {
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(len(s)))
	w.b = append(w.b, s...)
}

// time writes seconds and nanoseconds apart, so that any time, even the
// zero time of a zero ManualClock, survives the round trip.
func (w *writer) time(t time.Time) {
	w.u64(uint64(t.Unix()))
	w.u64(uint64(t.Nanosecond()))
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) str() string {
	if len(r.b) < 2 {
		r.bad = true
		return ""
	}
	n := int(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	if len(r.b) < n {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) time() time.Time {
	sec, nsec := int64(r.u64()), r.u64()
	if nsec >= 1e9 {
		r.bad = true
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (f *Fake) seal(kind byte, body []byte) string {
	msg := append([]byte{kind}, body...)
	m := hmac.New(sha256.New, f.key[:])
	m.Write(msg)
	msg = append(msg, m.Sum(nil)[:macLen]...)
	return base64.StdEncoding.EncodeToString(msg)
}

func (f *Fake) open(kind byte, s string) (*reader, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) < 1+macLen || raw[0] != kind {
		return nil, errMalformed
	}
	msg, sum := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	m := hmac.New(sha256.New, f.key[:])
	m.Write(msg)
	if !hmac.Equal(sum, m.Sum(nil)[:macLen]) {
		return nil, errMalformed
	}
	return &reader{b: msg[1:]}, nil
}

func (f *Fake) encodeIterator(it iterator) string {
	var w writer
	w.u64(it.streamID)
	w.str(it.stream)
	w.u64(uint64(it.shard))
	w.u64(it.from)
	w.time(it.issued)
	return f.seal(kindIterator, w.b)
}

func (f *Fake) decodeIterator(s string) (iterator, error) {
	r, err := f.open(kindIterator, s)
	if err != nil {
		return iterator{}, err
	}
	it := iterator{streamID: r.u64(), stream: r.str(), shard: int(r.u64()), from: r.u64(), issued: r.time()}
	if r.bad || len(r.b) != 0 {
		return iterator{}, errMalformed
	}
	return it, nil
}

func (f *Fake) encodeNextToken(t nextToken) string {
	var w writer
	w.u64(t.streamID)
	w.str(t.stream)
	w.u64(uint64(t.after))
	w.str(t.filterType)
	w.time(t.filterTime)
	w.time(t.issued)
	return f.seal(kindNextToken, w.b)
}

func (f *Fake) decodeNextToken(s string) (nextToken, error) {
	r, err := f.open(kindNextToken, s)
	if err != nil {
		return nextToken{}, err
	}
	t := nextToken{streamID: r.u64(), stream: r.str(), after: int(r.u64()), filterType: r.str(), filterTime: r.time(), issued: r.time()}
	if r.bad || len(r.b) != 0 {
		return nextToken{}, errMalformed
	}
	return t, nil
}
