package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// The fuzz tests of this file feed the decoders of the table's items text
// as an operator may leave it after editing an item by hand: each decoder
// returns a value, or an error that wraps ErrBadItem and names the item,
// and never panics. A value decoded so survives the package's own
// encoding: written and read again it is the same value, and a second
// round changes nothing. A value built as the package writes one reads
// back as written.

const (
	fuzzStream = "orders"
	fuzzHost   = "host-a"
	fuzzARN    = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
	fuzzSeq    = "49590338271490256608559692538361571095921575989136588898"
)

// fuzzCreated is a stream's creation time as AWS gives it (milliseconds).
var fuzzCreated = time.Date(2024, 3, 5, 10, 11, 12, 345e6, time.UTC)

// hugeText is a long hand-edited value: 8 KiB of one letter.
var hugeText = strings.Repeat("x", 8<<10)

// fuzzTime maps n to a time as the package stores one: the zero time for
// 0, otherwise a UTC instant from 1970 through 9999, to the nanosecond.
func fuzzTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	const secs = 253402300800 // 1970-01-01 to 10000-01-01
	u := uint64(n)
	return time.Unix(int64(u%secs), int64(u/secs%1e9)).UTC()
}

// fuzzDigits is seq's decimal digits as a sequence number: at most
// scan.MaxSequenceDigits of them, fuzzSeq when it has none.
func fuzzDigits(seq string) string {
	d := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, seq)
	if d == "" {
		return fuzzSeq
	}
	return d[:min(len(d), scan.MaxSequenceDigits)]
}

// fuzzPosition maps kind (mod 7) to a valid position of each kind, from
// seq and ts; 0 is the zero Position (no position).
func fuzzPosition(kind uint8, seq string, ts int64) scan.Position {
	at := fuzzTime(ts)
	if at.IsZero() {
		at = fuzzCreated
	}
	switch kind % 7 {
	case 1:
		return scan.Latest()
	case 2:
		return scan.TrimHorizon()
	case 3:
		return scan.AtTimestamp(at)
	case 4:
		return scan.AtSequence(fuzzDigits(seq))
	case 5:
		return scan.AfterSequence(fuzzDigits(seq))
	case 6:
		return scan.ShardEnd()
	}
	return scan.Position{}
}

// fuzzIDs splits list at commas into the sorted, distinct, hintable shard
// IDs a host's hint may name, as addHint keeps them.
func fuzzIDs(list string) []string {
	var ids []string
	for id := range strings.SplitSeq(list, ",") {
		if hintable(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// fuzzHint is a hint as addHint leaves one: none for from 0, otherwise
// from with the IDs of list, or all when there are none or too many.
func fuzzHint(from uint64, all bool, list string) hint {
	if from == 0 {
		return hint{}
	}
	ids := fuzzIDs(list)
	if all || len(ids) == 0 || len(ids) > maxHintIDs {
		return hint{from: from, all: true}
	}
	return hint{from: from, ids: ids}
}

// handEdited returns the existing item part/key whose fields are the
// pairs (name, value) of kv, empty values included: a hand edit may leave
// a field empty rather than remove it.
func handEdited(part, key string, kv ...string) Item {
	it := Item{Partition: part, Key: key, Version: 1, Fields: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		it.Fields[kv[i]] = kv[i+1]
	}
	return it
}

// wantBadItem fails t unless err wraps ErrBadItem and names one of items.
func wantBadItem(t *testing.T, err error, items ...Item) {
	t.Helper()
	if !errors.Is(err, ErrBadItem) {
		t.Fatalf("error %v does not wrap ErrBadItem", err)
	}
	for _, it := range items {
		if strings.Contains(err.Error(), it.Partition+"/"+it.Key) {
			return
		}
	}
	t.Fatalf("error %v names none of the items", err)
}

// closeRate reports whether got is want as a stored rate reads back: the
// same, or rounded to a whole number of bytes/s.
func closeRate(got, want float64) bool {
	if !(want > 0) {
		return got == 0
	}
	return got == want || math.Abs(got-want) <= 0.5
}

// sameIdentity reports whether a and b hold the same identity,
// generation, archive and T0 (times as instants).
func sameIdentity(a, b identityItem) bool {
	return a.id.Equal(b.id) && a.gen == b.gen && a.t0.Equal(b.t0) &&
		slices.EqualFunc(a.archived, b.archived, func(x, y Generation) bool {
			return x.Gen == y.Gen && x.Identity.Equal(y.Identity) && x.ReplacedBy.Equal(y.ReplacedBy)
		})
}

// sameInit reports whether a and b hold the same decision.
func sameInit(a, b initItem) bool {
	return a.lockOwner == b.lockOwner && a.lockToken == b.lockToken && a.committed == b.committed &&
		a.t0.Equal(b.t0) && a.progress == b.progress && a.identified == b.identified
}

// sameProgress reports whether a and b are the same progress of the same
// shard.
func sameProgress(a, b kinesisload.ShardProgress) bool {
	return a.ShardID == b.ShardID && same(a, b)
}

// sameShard reports whether a and b hold the same shard item, but for the
// rate, compared by closeRate.
func sameShard(a, b *shardItem) bool {
	return a.id == b.id && a.owner == b.owner && a.epoch == b.epoch && a.base == b.base &&
		a.handoff == b.handoff && a.rewind == b.rewind && closeRate(a.rate, b.rate) &&
		sameProgress(a.prog, b.prog) && maps.EqualFunc(a.pend, b.pend, sameProgress)
}

// sameHint reports whether a and b name the same changes and items.
func sameHint(a, b hint) bool {
	return a.from == b.from && a.all == b.all && slices.Equal(a.ids, b.ids)
}

// sameBeat reports whether b, read back, is a as written: a hint of from
// 0 and a load that is not positive are not written.
func sameBeat(b, a beat) bool {
	h := a.hint
	if h.from == 0 {
		h = hint{}
	}
	return a.counter == b.counter && a.changes == b.changes && a.by == b.by && a.left == b.left &&
		closeRate(b.load, a.load) && sameHint(b.hint, h)
}

// samePosEntry reports whether b, read back, is a as written.
func samePosEntry(b, a posEntry) bool {
	return a.epoch == b.epoch && a.pos.Equal(b.pos) && closeRate(b.rate, a.rate)
}

// sameRewind reports whether a and b are the same rewind (times as
// instants).
func sameRewind(a, b kinesisload.Rewind) bool {
	return a.Shard == b.Shard && a.ID == b.ID && a.By == b.By && a.At.Equal(b.At) && a.Reason == b.Reason &&
		a.From.Equal(b.From) && a.To.Equal(b.To) && a.SinkPending == b.SinkPending
}

// seedIdentities are identity items as the package writes them: a first
// generation's, with T0, and a third generation's, with its archive.
func seedIdentities() []Item {
	id0 := kinesisload.StreamIdentity{ARN: fuzzARN, Created: fuzzCreated}
	id1 := kinesisload.StreamIdentity{ARN: fuzzARN, Created: fuzzCreated.Add(24 * time.Hour)}
	id2 := kinesisload.StreamIdentity{ARN: fuzzARN, Created: fuzzCreated.Add(48 * time.Hour)}
	return []Item{
		identityItem{item: Item{Version: 1}, id: id0, t0: fuzzCreated.Add(time.Minute)}.encode(fuzzStream),
		identityItem{item: Item{Version: 9}, id: id2, gen: 2, archived: []Generation{
			{Gen: 0, Identity: id0, ReplacedBy: id1}, {Gen: 1, Identity: id1, ReplacedBy: id2},
		}}.encode(fuzzStream),
	}
}

// seedShards are shard items as the package writes them: an owned ACTIVE
// shard with a rate, a handoff and a rewind, and a child shard with a
// pending initialisation batch.
func seedShards() []*shardItem {
	rw, _ := json.Marshal(kinesisload.Rewind{ID: "rw-1", By: "ops@bastion", At: fuzzCreated, Reason: "replay",
		From: scan.AfterSequence(fuzzSeq), To: scan.AtTimestamp(fuzzCreated), SinkPending: true})
	return []*shardItem{
		{id: "shardId-000000000007", item: Item{Version: 4}, owner: fuzzHost, epoch: epochBase(1) + 12, base: epochBase(1) + 10,
			handoff: "host-b", rate: 2048, rewind: string(rw),
			prog: kinesisload.ShardProgress{ShardID: "shardId-000000000007", State: kinesisload.StateActive, Position: scan.AfterSequence(fuzzSeq)}},
		{id: "shardId-000000000012", item: Item{Version: 1}, epoch: 5,
			prog: kinesisload.ShardProgress{ShardID: "shardId-000000000012", Parents: []string{"shardId-000000000007", "shardId-000000000008"}, State: kinesisload.StatePendingParent},
			pend: map[string]kinesisload.ShardProgress{"batch-1": {ShardID: "shardId-000000000012", State: kinesisload.StateActive, Position: scan.TrimHorizon()}}},
	}
}

// seedBeats are roster entries as hosts write them.
func seedBeats() []beat {
	return []beat{
		{counter: 7, changes: 3},
		{counter: 41, changes: 9, by: kinesisload.BalanceByThroughput, load: 3 * kinesisload.RateFloor,
			hint: hint{from: 8, ids: []string{"shardId-000000000000", "shardId-000000000102"}}},
		{counter: 1, changes: 9, left: true, hint: hint{from: 9, all: true}},
		{counter: 2, changes: 4, hint: hint{from: 4, ids: []string{"orders-7", "shardId-12"}}},
	}
}

// seedPosEntries are positions chunk entries as hosts write them.
func seedPosEntries() []posEntry {
	return []posEntry{
		{epoch: 7, pos: scan.AfterSequence(fuzzSeq)},
		{epoch: epochBase(3) + 1, pos: scan.AfterSequence(fuzzSeq), rate: 250},
		{epoch: 1 << 40, pos: scan.AtTimestamp(fuzzCreated), rate: 1e6},
		{epoch: 2, pos: scan.TrimHorizon()},
		{epoch: 2, pos: scan.ShardEnd()},
		{epoch: 2, pos: scan.AtSequence("1")},
	}
}

// An identity item edited by hand decodes to an identity that reads back
// as the package writes it, or to an error naming the item.
func FuzzAHandEditedIdentityItemDecodesOrErrs(f *testing.F) {
	for _, it := range seedIdentities() {
		f.Add(it.Field("arn"), it.Field("created"), it.Field("gen"), it.Field("t0"), it.Field("archived"))
	}
	arch := seedIdentities()[1].Field("archived")
	for _, s := range [][5]string{
		{"", "", "", "", ""},
		{fuzzARN, "2024-03-05T10:11:12Z", "18446744073709551615", "", "[]"},
		{fuzzARN, "2024-03-05T10:11:12Z", "18446744073709551616", "", "null"},
		{fuzzARN, "2024-03-05 10:11:12Z", "-1", "yesterday", "{}"},
		{fuzzARN, "2024-03-05T10:11:12+05:30", " 3", "2024-03-05T10:11:12.123456789-08:00", `[{"gen":"1"}]`},
		{fuzzARN, "0001-01-01T00:00:00Z", "٣", "9999-12-31T23:59:59.999999999Z", `[{"gen":1,"identity":{"arn":"x","created":"bad"}}]`},
		{"arn:aws:kinesis:ap-northeast-1:1:stream/注文", "2024-02-30T00:00:00Z", "0", "0000-01-01T00:00:00Z", arch[:len(arch)/2]},
		{hugeText, "", "1" + strings.Repeat("0", 400), "", "[" + strings.Repeat(`{"gen":1},`, 1000) + `{"gen":2}]`},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, arn, created, gen, t0, archived string) {
		it := handEdited(fuzzStream, keyIdentity, "arn", arn, "created", created, "gen", gen, "t0", t0, "archived", archived)
		ii, err := decodeIdentity(it)
		if err != nil {
			wantBadItem(t, err, it)
			return
		}
		if ii.id.ARN != arn {
			t.Fatalf("ARN %q decoded as %q", arn, ii.id.ARN)
		}
		written := ii.encode(fuzzStream)
		back, err := decodeIdentity(written)
		if err != nil {
			t.Fatalf("identity %+v decoded from %v is written as %v, which does not decode: %v", ii, it.Fields, written.Fields, err)
		}
		want := ii
		if want.gen > 0 {
			want.t0 = time.Time{} // a later generation's T0 is not written
		}
		if !sameIdentity(back, want) {
			t.Fatalf("identity %+v decoded from %v reads back as %+v (written as %v)", want, it.Fields, back, written.Fields)
		}
		if again := back.encode(fuzzStream); !maps.Equal(again.Fields, written.Fields) {
			t.Fatalf("identity written as %v, read back and written again as %v", written.Fields, again.Fields)
		}
	})
}

// An identity item the package writes reads back as written.
func FuzzAnIdentityItemReadsBackAsWritten(f *testing.F) {
	f.Add(fuzzARN, fuzzCreated.UnixNano(), uint64(0), fuzzCreated.Add(time.Minute).UnixNano(), uint8(0), "")
	f.Add(fuzzARN, fuzzCreated.Unix(), uint64(3), int64(0), uint8(3), "arn:aws:kinesis:us-east-1:1:stream/old")
	f.Add("", int64(0), uint64(0), int64(0), uint8(0), "")
	f.Add("arn:ünïcode/流 \t", int64(-1), uint64(math.MaxUint64), int64(math.MaxInt64), uint8(255), "\xff\xfe")
	f.Fuzz(func(t *testing.T, arn string, created int64, gen uint64, t0 int64, archived uint8, oldARN string) {
		ii := identityItem{item: Item{Version: 1}, id: kinesisload.StreamIdentity{ARN: arn, Created: fuzzTime(created)}, gen: gen}
		if gen == 0 {
			ii.t0 = fuzzTime(t0) // written in generation 0 only
		}
		// The earlier generations of a later one, as start-overs
		// archive them (an ARN is text: JSON carries valid UTF-8).
		oldARN = strings.ToValidUTF8(oldARN, "?")
		for g := range min(gen, uint64(archived%4)) {
			ii.archived = append(ii.archived, Generation{Gen: g,
				Identity:   kinesisload.StreamIdentity{ARN: oldARN, Created: fuzzTime(created/2 + int64(g))},
				ReplacedBy: kinesisload.StreamIdentity{ARN: oldARN, Created: fuzzTime(created/2 + int64(g) + 1)}})
		}
		written := ii.encode(fuzzStream)
		back, err := decodeIdentity(written)
		if err != nil {
			t.Fatalf("identity %+v written as %v does not decode: %v", ii, written.Fields, err)
		}
		if !sameIdentity(back, ii) {
			t.Fatalf("identity %+v written as %v reads back as %+v", ii, written.Fields, back)
		}
	})
}

// An init item edited by hand decodes to a decision that reads back as
// the package writes it, or to an error naming the item.
func FuzzAHandEditedInitItemDecodesOrErrs(f *testing.F) {
	it := initItem{lockOwner: fuzzHost, lockToken: "tok-5f3a", committed: "batch-1", t0: fuzzCreated, progress: 17, identified: true}.encode(fuzzStream)
	f.Add(it.Field("lockOwner"), it.Field("lockToken"), it.Field("committed"), it.Field("t0"), it.Field("progress"), it.Field("identified"))
	for _, s := range [][6]string{
		{"", "", "", "", "", ""},
		{fuzzHost, "tok", "", "", "18446744073709551615", "true"},
		{fuzzHost, "tok", "", "2024-03-05T10:11:12", "18446744073709551616", "0"},
		{" host a ", "tok", "batch 1", "2024-03-05T10:11:12.5+14:00", "-3", "1 "},
		{"hôte-流", "\x00", "\xff", "2024-13-05T10:11:12Z", "0x10", "1"},
		{hugeText, hugeText, hugeText, "", "+7", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(func(t *testing.T, lockOwner, lockToken, committed, t0, progress, identified string) {
		it := handEdited(fuzzStream, keyInit, "lockOwner", lockOwner, "lockToken", lockToken, "committed", committed,
			"t0", t0, "progress", progress, "identified", identified)
		ii, err := decodeInit(it)
		if err != nil {
			wantBadItem(t, err, it)
			return
		}
		written := ii.encode(fuzzStream)
		back, err := decodeInit(written)
		if err != nil {
			t.Fatalf("init %+v decoded from %v is written as %v, which does not decode: %v", ii, it.Fields, written.Fields, err)
		}
		if !sameInit(back, ii) {
			t.Fatalf("init %+v decoded from %v reads back as %+v (written as %v)", ii, it.Fields, back, written.Fields)
		}
		if again := back.encode(fuzzStream); !maps.Equal(again.Fields, written.Fields) {
			t.Fatalf("init written as %v, read back and written again as %v", written.Fields, again.Fields)
		}
	})
}

// An init item the package writes reads back as written.
func FuzzAnInitItemReadsBackAsWritten(f *testing.F) {
	f.Add(fuzzHost, "tok-5f3a", "batch-1", fuzzCreated.UnixNano(), uint64(17), true)
	f.Add("", "", "", int64(0), uint64(0), false)
	f.Add("hôte 流", "\x00", "\xff", int64(-1), uint64(math.MaxUint64), true)
	f.Fuzz(func(t *testing.T, lockOwner, lockToken, committed string, t0 int64, progress uint64, identified bool) {
		ii := initItem{item: Item{Version: 1}, lockOwner: lockOwner, lockToken: lockToken, committed: committed,
			t0: fuzzTime(t0), progress: progress, identified: identified}
		written := ii.encode(fuzzStream)
		back, err := decodeInit(written)
		if err != nil {
			t.Fatalf("init %+v written as %v does not decode: %v", ii, written.Fields, err)
		}
		if !sameInit(back, ii) {
			t.Fatalf("init %+v written as %v reads back as %+v", ii, written.Fields, back)
		}
	})
}

// A shard item edited by hand decodes to a shard item that reads back as
// the package writes it, or to an error naming the item; what the
// protocol derives from it (its visible progress, its rewind) is had
// without a panic.
func FuzzAHandEditedShardItemDecodesOrErrs(f *testing.F) {
	for _, s := range seedShards() {
		it := s.encode(fuzzStream)
		tok, pend := "", ""
		for k, v := range it.Maps[fieldPend] {
			tok, pend = k, v
		}
		f.Add(s.id, it.Field("owner"), it.Field("epoch"), it.Field("base"), it.Field("handoff"), it.Field("rate"),
			it.Field("prog"), it.Field("rewind"), tok, pend)
	}
	prog := `{"id":"shardId-000000000001","parents":["shardId-000000000000"],"state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:` + fuzzSeq + `"}`
	for _, s := range [][10]string{
		{"", "", "", "", "", "", "", "", "", ""},
		{"shardId-000000000001", fuzzHost, "18446744073709551615", "18446744073709551616", "", "NaN", prog, "null", "", "{}"},
		{"shardId-000000000001", "", "-1", " 5", "", "+Inf", `{"state":"active","pos":"-2"}`, "{}", "b", "null"},
		{"shardId-000000000001", "", "1e3", "0x10", "", "-7", `{"state":9}`, `{"to":"LATEST"}`, "b", `{"pos":""}`},
		{"shardId-000000000001", "", "", "", "", "1e400", `{"pos":"AT_TIMESTAMP:2024-03-05T10:11:12+05:30"}`, `{"from":"bogus"}`, "", `{"pos":"SHARD_END:1"}`},
		{"shardId-000000000001", "", "3", "", "", "0.3", `{"parents":null,"pos":"` + strings.Repeat("9", 129) + `"}`, "", "", `[`},
		{"流-шард", "hôte", "3", "3", "hôte", "2.5", `{"id":"other","parents":[""]}`, "\xff", "\xff", `{"state":"NONE"}`},
		{hugeText, hugeText, "3", "", hugeText, "", `{"parents":["` + hugeText + `"]}`, hugeText, hugeText, `{}`},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9])
	}
	f.Fuzz(func(t *testing.T, id, owner, epoch, base, handoff, rate, prog, rewind, pendTok, pend string) {
		it := handEdited(fuzzStream, prefixShard+id, "owner", owner, "epoch", epoch, "base", base, "handoff", handoff,
			"rate", rate, "prog", prog, "rewind", rewind)
		if pendTok != "" || pend != "" {
			it.Maps = map[string]map[string]string{fieldPend: {pendTok: pend}}
		}
		s, err := decodeShard(it)
		if err != nil {
			wantBadItem(t, err, it)
			return
		}
		if s.id != id || s.prog.ShardID != id {
			t.Fatalf("shard %q decoded as %q (progress of %q)", id, s.id, s.prog.ShardID)
		}
		for _, committed := range []string{"", pendTok} {
			if p := s.visible(committed); p.ShardID != id {
				t.Fatalf("shard %q is visible as %q", id, p.ShardID)
			}
		}
		_ = s.everOwned(1)
		if rw, ok := decodeRewind(s); ok && rw.Shard != id {
			t.Fatalf("shard %q has the rewind of %q", id, rw.Shard)
		}
		written := s.encode(fuzzStream)
		back, err := decodeShard(written)
		if err != nil {
			t.Fatalf("shard %+v decoded from %v is written as %v %v, which does not decode: %v", s, it.Fields, written.Fields, written.Maps, err)
		}
		if !sameShard(back, s) {
			t.Fatalf("shard %+v decoded from %v reads back as %+v (written as %v %v)", s, it.Fields, back, written.Fields, written.Maps)
		}
		again := back.encode(fuzzStream)
		if !maps.Equal(again.Fields, written.Fields) || !maps.Equal(again.Maps[fieldPend], written.Maps[fieldPend]) {
			t.Fatalf("shard written as %v %v, read back and written again as %v %v", written.Fields, written.Maps, again.Fields, again.Maps)
		}
	})
}

// A shard item the package writes reads back as written.
func FuzzAShardItemReadsBackAsWritten(f *testing.F) {
	f.Add("shardId-000000000007", fuzzHost, "host-b", epochBase(1)+12, epochBase(1)+10, uint32(2048),
		"shardId-000000000003,shardId-000000000004", uint8(kinesisload.StateActive), uint8(5), fuzzSeq, int64(0), "", `{"id":"rw-1"}`)
	f.Add("shardId-000000000012", "", "", uint64(5), uint64(0), uint32(0), "", uint8(kinesisload.StatePendingParent), uint8(0), "", int64(0), "batch-1", "")
	f.Add("流 \t", "hôte", "\xff", uint64(math.MaxUint64), uint64(math.MaxUint64), uint32(math.MaxUint32), "\xff,,a", uint8(255), uint8(3), "x", fuzzCreated.UnixMilli(), "\x00", hugeText)
	f.Fuzz(func(t *testing.T, id, owner, handoff string, epoch, base uint64, rate uint32, parents string,
		state, kind uint8, seq string, ts int64, pendTok, rewind string) {
		p := kinesisload.ShardProgress{ShardID: id, State: kinesisload.ShardState(state % 6), Position: fuzzPosition(kind, seq, ts)}
		if parents != "" {
			// Shard IDs are text: JSON carries valid UTF-8.
			p.Parents = strings.Split(strings.ToValidUTF8(parents, "?"), ",")
		}
		s := &shardItem{id: id, item: Item{Version: 1}, owner: owner, epoch: epoch, base: base, handoff: handoff,
			rate: float64(min(rate, maxRate)), prog: p, rewind: rewind} // a meter's rate: what a shard can be read at
		if pendTok != "" {
			s.pend = map[string]kinesisload.ShardProgress{pendTok: {ShardID: id, State: kinesisload.StateActive, Position: fuzzPosition(kind+1, seq, ts)}}
		}
		written := s.encode(fuzzStream)
		back, err := decodeShard(written)
		if err != nil {
			t.Fatalf("shard %+v written as %v %v does not decode: %v", s, written.Fields, written.Maps, err)
		}
		if !sameShard(back, s) || back.rate != s.rate {
			t.Fatalf("shard %+v written as %v %v reads back as %+v", s, written.Fields, written.Maps, back)
		}
	})
}

// A hint edited by hand decodes to a hint that reads back as written, or
// to an error.
func FuzzAHandEditedHintDecodesOrErrs(f *testing.F) {
	for _, b := range seedBeats() {
		f.Add(b.hint.String())
	}
	for _, s := range []string{
		"", ":", "5", "5:", "5:~", "5:,", "0:0", ":*", "5:**", "5:*,1", "-1:*", " 5:1", "5:1 ", "5: 1",
		"18446744073709551615:*", "18446744073709551616:*", "5:999999999999", "5:1000000000000", "5:-1",
		"5:007", "5:~a,~a", "5:~a:b", "5:~shardId-000000000007", "5:~流", "5:٣", "5:~\xff",
		"5:" + strings.Repeat("1,", 5000) + "1", "5:~" + hugeText,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h, err := parseHint(v)
		if err != nil {
			return
		}
		written := h.String()
		back, err := parseHint(written)
		if err != nil {
			t.Fatalf("hint %+v decoded from %q is written as %q, which does not decode: %v", h, v, written, err)
		}
		if !sameHint(back, h) {
			t.Fatalf("hint %+v decoded from %q reads back as %+v (written as %q)", h, v, back, written)
		}
		if again := back.String(); again != written {
			t.Fatalf("hint written as %q, read back and written again as %q", written, again)
		}
	})
}

// A hint a host writes reads back as written, alone and in its roster
// entry.
func FuzzAHintReadsBackAsWritten(f *testing.F) {
	f.Add(uint64(2), false, "shardId-000000000000,shardId-000000000102")
	f.Add(uint64(9), true, "")
	f.Add(uint64(4), false, "orders-7,shardId-12,shardId-000000000003")
	f.Add(uint64(math.MaxUint64), false, "~a,流,=,left,c=1,shardId-999999999999,shardId-1000000000000")
	f.Fuzz(func(t *testing.T, from uint64, all bool, ids string) {
		h := fuzzHint(max(from, 1), all, ids)
		written := h.String()
		back, err := parseHint(written)
		if err != nil {
			t.Fatalf("hint %+v written as %q does not decode: %v", h, written, err)
		}
		if !sameHint(back, h) {
			t.Fatalf("hint %+v written as %q reads back as %+v", h, written, back)
		}
		b := beat{counter: 3, changes: h.from, hint: h}
		entry := b.String()
		got, err := parseBeat(entry)
		if err != nil {
			t.Fatalf("roster entry with hint %+v, written as %q, does not decode: %v", h, entry, err)
		}
		if !sameHint(got.hint, h) {
			t.Fatalf("roster entry with hint %+v, written as %q, reads back with %+v", h, entry, got.hint)
		}
	})
}

// A roster entry edited by hand decodes to a beat that the package writes
// in a form that reads back byte for byte (a host's next beat is
// conditional on its entry as it writes it), or to an error.
func FuzzAHandEditedBeatDecodesOrErrs(f *testing.F) {
	for _, b := range seedBeats() {
		f.Add(b.String())
	}
	for _, s := range []string{
		"", " ", "left", "c=1", "c=", "=", "c=1=2", "c=1 v=2 x=3", "v=2 c=1", "c=1  v=2\t", "c=1\u00a0v=2",
		"c=18446744073709551615 v=18446744073709551615", "c=18446744073709551616", "c=-1", "c=+1", "c=٣",
		"c=1 b=1 w=NaN", "c=1 b=1 w=-5", "c=1 b=1 w=+Inf", "c=1 b=1 w=1e400", "c=1 b=1 w=1024.5", "c=1 b=-7",
		"c=1 b=9223372036854775808", "c=1 h=", "c=1 h=0:1", "c=1 h=5:~流,3", "c=1 h=5:1 h=6:*", "c=1 left left",
		"c=1 v=2 h=1:" + strings.Repeat("~"+hugeText[:64]+",", 500) + "1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		b, err := parseBeat(v)
		if err != nil {
			return
		}
		written := b.String()
		back, err := parseBeat(written)
		if err != nil {
			t.Fatalf("beat %+v decoded from %q is written as %q, which does not decode: %v", b, v, written, err)
		}
		if !sameBeat(back, b) {
			t.Fatalf("beat %+v decoded from %q reads back as %+v (written as %q)", b, v, back, written)
		}
		if again := back.String(); again != written {
			t.Fatalf("beat written as %q, read back and written again as %q", written, again)
		}
	})
}

// A roster entry a host writes reads back byte for byte.
func FuzzABeatReadsBackAsWritten(f *testing.F) {
	for _, b := range seedBeats() {
		f.Add(b.counter, b.changes, b.by == kinesisload.BalanceByThroughput, b.load, b.left, b.hint.from, b.hint.all, strings.Join(b.hint.ids, ","))
	}
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), true, math.MaxFloat64, true, uint64(math.MaxUint64), false, "~x,流,=")
	f.Add(uint64(0), uint64(0), true, 1234.5678, false, uint64(0), false, "")
	f.Fuzz(func(t *testing.T, counter, changes uint64, throughput bool, load float64, left bool, from uint64, all bool, ids string) {
		b := beat{counter: counter, changes: changes, left: left, hint: fuzzHint(from, all, ids)}
		if throughput {
			// The sum of the weights of the shards it holds, each at
			// least RateFloor: none or RateFloor and up.
			b.by = kinesisload.BalanceByThroughput
			if load > 0 && !math.IsInf(load, 1) {
				b.load = max(load, kinesisload.RateFloor)
			}
		}
		written := b.String()
		back, err := parseBeat(written)
		if err != nil {
			t.Fatalf("beat %+v written as %q does not decode: %v", b, written, err)
		}
		if !sameBeat(back, b) {
			t.Fatalf("beat %+v written as %q reads back as %+v", b, written, back)
		}
		if again := back.String(); again != written {
			t.Fatalf("beat written as %q reads back and is written again as %q", written, again)
		}
	})
}

// A roster edited by hand decodes to every host's beat, its entries as
// stored and the generation that replaced it (an entry that does not
// decode set aside with an error naming the item), or, for a generation
// entry that does not decode, to an error naming the item.
func FuzzAHandEditedRosterDecodesOrErrs(f *testing.F) {
	bs := seedBeats()
	f.Add(fuzzHost, bs[1].String(), "host-b", bs[2].String(), "")
	f.Add(fuzzHost, bs[0].String(), entryGen, "3", "4")
	f.Add("", "", "", "", "")
	f.Add(fuzzHost, "c=1", "host-b", "c=x", "")
	f.Add("hôte 流", "c=1 v=2 left", entryGen, "-1", "18446744073709551616")
	f.Add(hugeText, "c=1", rewindEntryPrefix+"rw-1", beat{changes: 1, left: true}.String(), " 1")
	f.Fuzz(func(t *testing.T, host1, v1, host2, v2, next string) {
		entries := map[string]string{host1: v1, host2: v2}
		if next != "" {
			entries[entryGen] = next
		}
		it := Item{Partition: partition(fuzzStream, 2), Key: keyRoster, Version: 3, Maps: map[string]map[string]string{fieldBeats: entries}}
		r, err := decodeRoster(it)
		if err != nil {
			wantBadItem(t, err, it)
			return
		}
		for host, v := range entries {
			if host == entryGen {
				if n, _ := strconv.ParseUint(v, 10, 64); r.next != n {
					t.Fatalf("%s = %q decoded as %d", entryGen, v, r.next)
				}
				continue
			}
			want, perr := parseBeat(v)
			if perr != nil {
				// An entry that does not decode is set aside, named,
				// with its raw value: the roster still decodes.
				if _, ok := r.beats[host]; ok || r.raw[host] != v {
					t.Fatalf("undecodable entry %q = %q: in beats %v, raw %q", host, v, ok, r.raw[host])
				}
				wantBadItem(t, r.bad[host], it)
				continue
			}
			if got, ok := r.beats[host]; !ok || r.raw[host] != v || got.String() != want.String() {
				t.Fatalf("entry %q = %q decoded as %+v (raw %q)", host, v, got, r.raw[host])
			}
		}
	})
}

// A positions chunk entry edited by hand decodes to an entry that reads
// back as the package writes it, or to an error.
func FuzzAHandEditedPositionEntryDecodesOrErrs(f *testing.F) {
	for _, e := range seedPosEntries() {
		f.Add(e.String())
	}
	for _, s := range []string{
		"", "7", "7 ", " 7  " + fuzzSeq + "  250 ", "7 " + fuzzSeq + " 250 9", "-1 " + fuzzSeq, "x " + fuzzSeq,
		"18446744073709551616 1", "7 -1", "7 -2", "7 LATEST", "7 latest", "7 SHARD_END:1", "7 AFTER_SEQUENCE_NUMBER:",
		"7 AFTER_SEQUENCE_NUMBER:" + fuzzSeq + " 12", "7 AT_TIMESTAMP:2024-03-05T10:11:12+05:30 3",
		"7 AT_TIMESTAMP:2024-03-05T10:11:12.123456789Z", "7 AT_TIMESTAMP:yesterday", "7 " + strings.Repeat("9", 128),
		"7 " + strings.Repeat("9", 129), "7 1 NaN", "7 1 -5", "7 1 +Inf", "7 1 1e400", "7 1 0.3", "7 1 2.5",
		"٣ ١", "7\u00a0" + fuzzSeq, "7 " + hugeText,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		e, err := parsePosEntry(v)
		if err != nil {
			return
		}
		written := e.String()
		back, err := parsePosEntry(written)
		if err != nil {
			t.Fatalf("entry %+v decoded from %q is written as %q, which does not decode: %v", e, v, written, err)
		}
		if !samePosEntry(back, e) {
			t.Fatalf("entry %+v decoded from %q reads back as %+v (written as %q)", e, v, back, written)
		}
		again, err := parsePosEntry(back.String())
		if err != nil || !samePosEntry(again, back) || again.String() != back.String() {
			t.Fatalf("entry written as %q, read back and written again as %q", back.String(), again.String())
		}
	})
}

// A positions chunk entry a host writes reads back as written (its rate
// to the byte/s).
func FuzzAPositionEntryReadsBackAsWritten(f *testing.F) {
	for _, e := range seedPosEntries() {
		f.Add(e.epoch, uint8(e.pos.Kind), e.pos.Sequence, e.pos.Timestamp.UnixMilli(), e.rate)
	}
	f.Add(uint64(math.MaxUint64), uint8(3), "", int64(-1), math.MaxFloat64)
	f.Add(uint64(0), uint8(5), "0000", int64(0), 0.3)
	f.Fuzz(func(t *testing.T, epoch uint64, kind uint8, seq string, ts int64, rate float64) {
		if kind%7 == 0 {
			kind = uint8(scan.KindAfterSequence) // every entry has a position
		}
		e := posEntry{epoch: epoch, pos: fuzzPosition(kind, seq, ts)}
		if rate > 0 && rate <= maxRate {
			e.rate = rate // a meter's rate: what a shard can be read at
		}
		written := e.String()
		back, err := parsePosEntry(written)
		if err != nil {
			t.Fatalf("entry %+v written as %q does not decode: %v", e, written, err)
		}
		if !samePosEntry(back, e) {
			t.Fatalf("entry %+v written as %q reads back as %+v", e, written, back)
		}
	})
}

// A host's positions chunks edited by hand decode to every shard's entry
// that decodes, with an error naming the chunk of each that does not.
func FuzzAHandEditedPositionsChunkDecodesOrErrs(f *testing.F) {
	es := seedPosEntries()
	f.Add(prefixPos+"0", "shardId-000000000007", es[0].String(), prefixPos+"1", "shardId-000000000008", es[2].String())
	f.Add(prefixPos+"0", "shardId-000000000007", es[0].String(), prefixPos+"1", "shardId-000000000007", es[1].String())
	f.Add("", "", "", "", "", "")
	f.Add(prefixPos+"0", "流", "7 x", "pos", " ", "٣ ١")
	f.Fuzz(func(t *testing.T, key1, shard1, v1, key2, shard2, v2 string) {
		pp := posPartition(partition(fuzzStream, 1), fuzzHost)
		items := []Item{
			{Partition: pp, Key: key1, Version: 1, Maps: map[string]map[string]string{fieldPos: {shard1: v1}}},
			{Partition: pp, Key: key2, Version: 2, Maps: map[string]map[string]string{fieldPos: {shard2: v2}}},
		}
		got, err := decodePositions(items)
		want, bad := map[string]string{}, false
		for _, kv := range [][2]string{{shard1, v1}, {shard2, v2}} {
			e, perr := parsePosEntry(kv[1])
			if perr != nil {
				bad = true
				continue
			}
			if was, ok := want[kv[0]]; ok {
				// In both chunks: the later lease's, or of one lease
				// the position MergeProgress keeps (a tie: the later
				// chunk's).
				w, _ := parsePosEntry(was)
				if e.epoch < w.epoch {
					continue
				}
				if e.epoch == w.epoch {
					kept := kinesisload.MergeProgress(kinesisload.ShardProgress{Position: e.pos}, kinesisload.ShardProgress{Position: w.pos}).Position
					if !kept.Equal(e.pos) {
						continue
					}
				}
			}
			want[kv[0]] = kv[1]
		}
		if bad {
			wantBadItem(t, err, items...)
		} else if err != nil {
			t.Fatalf("chunks decoded with %v, every entry decodes", err)
		}
		if len(got) != len(want) {
			t.Fatalf("chunks %v decoded as %v", want, got)
		}
		for shard, v := range want {
			e, _ := parsePosEntry(v)
			if g := got[shard]; g.epoch != e.epoch || !g.pos.Equal(e.pos) || math.Float64bits(g.rate) != math.Float64bits(e.rate) {
				t.Fatalf("entry %s = %q decoded as %+v", shard, v, got[shard])
			}
		}
	})
}

// A shard's rewind edited by hand is taken for none, or for a rewind that
// reads back as written; one pending for the Sink can be written back, as
// AckRewind does once the Sink is settled.
func FuzzAHandEditedRewindIsReadOrIgnored(f *testing.F) {
	for _, s := range seedShards() {
		f.Add(s.id, s.rewind)
	}
	for _, s := range []string{
		"", "[]", `"x"`, `{"to":"LATEST"}`, `{"id":"rw-1","to":"-2","at":"2024-03-05T10:11:12+05:30"}`,
		`{"id":"rw-1","to":"` + fuzzSeq + `","from":"","sink_pending":true}`, `{"id":"rw-1","to":"AT_TIMESTAMP:bad"}`,
		`{"id":"rw-1","to":"TRIM_HORIZON","at":"0000-01-01T00:00:00Z","reason":"` + hugeText + `"}`,
		`{"id":"rw-1","to":"TRIM_HORIZON","shard":"other","sink_pending":"yes"}`,
	} {
		f.Add("shardId-000000000001", s)
	}
	f.Fuzz(func(t *testing.T, id, raw string) {
		rw, ok := decodeRewind(&shardItem{id: id, rewind: raw})
		if !ok {
			return
		}
		if rw.Shard != id {
			t.Fatalf("the rewind %q of shard %q is taken for shard %q's", raw, id, rw.Shard)
		}
		written, err := json.Marshal(rw)
		if err != nil {
			if rw.SinkPending {
				t.Fatalf("the rewind %q of shard %q is taken for %+v, pending for the Sink, which AckRewind cannot write back: %v", raw, id, rw, err)
			}
			return // never written back
		}
		back, ok := decodeRewind(&shardItem{id: id, rewind: string(written)})
		if !ok || !sameRewind(back, rw) {
			t.Fatalf("rewind %+v written as %s reads back as %+v", rw, written, back)
		}
	})
}

// A rewind the package writes into a shard's item reads back as written.
func FuzzARewindReadsBackAsWritten(f *testing.F) {
	f.Add("shardId-000000000007", "rw-1", "ops@bastion", fuzzCreated.UnixNano(), "replay", uint8(5), uint8(3), fuzzSeq, true)
	f.Add("", "", "", int64(-1), "", uint8(0), uint8(2), "", false)
	f.Add("流", "\xff", "hôte", int64(math.MaxInt64), hugeText, uint8(4), uint8(4), "0", true)
	f.Fuzz(func(t *testing.T, shard, id, by string, at int64, reason string, from, to uint8, seq string, pending bool) {
		if to%7 == 0 || to%7 == 1 || to%7 == 6 {
			to = uint8(scan.KindTrimHorizon) // a rewind's To is concrete (CheckRewindPosition)
		}
		// Names and notes are text: JSON carries valid UTF-8.
		rw := kinesisload.Rewind{Shard: shard, ID: strings.ToValidUTF8(id, "?"), By: strings.ToValidUTF8(by, "?"),
			At: fuzzTime(at), Reason: strings.ToValidUTF8(reason, "?"),
			From: fuzzPosition(from, seq, at), To: fuzzPosition(to, seq, at), SinkPending: pending}
		raw, err := json.Marshal(rw)
		if err != nil {
			t.Fatalf("rewind %+v cannot be written: %v", rw, err)
		}
		back, ok := decodeRewind(&shardItem{id: shard, rewind: string(raw)})
		if !ok || !sameRewind(back, rw) {
			t.Fatalf("rewind %+v written as %s reads back as %+v (%v)", rw, raw, back, ok)
		}
	})
}

// A table whose items of a stream were edited by hand is read by the
// tools (Inspect, Rewinds), by Rewind's and Import's reads, and by the
// check of a missing identity, to a value or to an error that says an
// item is bad (or, for Rewind and Import, refuses): never a panic.
func FuzzAHandEditedTableIsReadOrErrs(f *testing.F) {
	ident := seedIdentities()[0]
	shard := seedShards()[0].encode(fuzzStream)
	entry := seedPosEntries()[1].String()
	bs := seedBeats()
	f.Add(ident.Field("arn"), ident.Field("created"), "", "", "batch-1", "1", fuzzHost, bs[1].String(),
		"shardId-000000000007", fuzzHost, shard.Field("epoch"), shard.Field("prog"), shard.Field("rewind"), entry)
	f.Add("", "", "", "", "", "", "", "", "shardId-000000000007", fuzzHost, "12", shard.Field("prog"), "", "")
	f.Add("", "", "", "", "batch-1", "1", "", "", "", "", "", "", "", "")
	f.Add(seedIdentities()[1].Field("arn"), "", "2", seedIdentities()[1].Field("archived"), "batch-1", "", fuzzHost, "c=1",
		"shardId-000000000007", fuzzHost, "x", "{", "null", "7 x")
	f.Add(fuzzARN, "", "18446744073709551615", `[{"gen":18446744073709551615}]`, "", "", entryGen, "1",
		"", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, arn, created, gen, archived, committed, identified, host, beatV,
		shardID, owner, epoch, prog, rewind, posV string) {
		ctx := context.Background()
		tbl := NewMemoryTable()
		put := func(it Item) {
			if _, err := tbl.Put(ctx, it); err != nil {
				t.Fatal(err)
			}
		}
		g, _ := strconv.ParseUint(gen, 10, 64)
		part := partition(fuzzStream, g)
		if arn != "" || created != "" || gen != "" || archived != "" {
			put(Item{Partition: fuzzStream, Key: keyIdentity, Fields: map[string]string{"arn": arn, "created": created, "gen": gen, "archived": archived}})
		}
		if committed != "" || identified != "" {
			put(Item{Partition: part, Key: keyInit, Fields: map[string]string{"lockOwner": owner, "committed": committed, "identified": identified}})
		}
		if host != "" || beatV != "" {
			put(Item{Partition: part, Key: keyRoster, Maps: map[string]map[string]string{fieldBeats: {host: beatV}}})
		}
		if shardID != "" || epoch != "" || prog != "" || rewind != "" {
			put(Item{Partition: part, Key: prefixShard + shardID, Fields: map[string]string{"owner": owner, "epoch": epoch, "prog": prog, "rewind": rewind}})
		}
		if posV != "" {
			put(Item{Partition: posPartition(part, owner), Key: prefixPos + "0", Maps: map[string]map[string]string{fieldPos: {shardID: posV}}})
		}
		bad := func(what string, err error, refusals ...error) {
			if err == nil || errors.Is(err, ErrBadItem) || slices.ContainsFunc(refusals, func(r error) bool { return errors.Is(err, r) }) {
				return
			}
			t.Fatalf("%s: %v: neither a value nor an error that an item is bad", what, err)
		}
		_, err := Inspect(ctx, tbl, fuzzStream)
		bad("Inspect", err)
		_, err = Rewinds(ctx, tbl, fuzzStream)
		bad("Rewinds", err)
		_, err = generationInForce(ctx, tbl, fuzzStream)
		bad("the generation a rewind writes to", err, kinesisload.ErrRewindRefused)
		err = Import(ctx, tbl, fuzzStream, kinesisload.StreamIdentity{}, nil)
		bad("Import of nothing", err, ErrNotEmpty)
	})
}

// A host joining again reads the keys of its positions chunks, as found
// in its positions partition, as chunk numbers, and skips a key that is
// none (an item an operator put there by hand): never a panic.
func FuzzAPositionsChunkKeyIsReadOrSkipped(f *testing.F) {
	for _, k := range []string{prefixPos + "0", prefixPos + "3", prefixPos + "00", prefixPos + "1048576", prefixPos + "1048577",
		prefixPos + "-1", prefixPos + "x", prefixPos, prefixPos + "9223372036854775808", "notes-1234", "流流流流1"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		ctx := context.Background()
		tbl := NewMemoryTable()
		stored, err := tbl.Put(ctx, Item{Partition: posPartition(fuzzStream, fuzzHost), Key: key, Fields: map[string]string{"note": "hand-made"}})
		if err != nil {
			t.Fatal(err)
		}
		m := &member{c: &Coordinator{table: tbl}, stream: fuzzStream, me: fuzzHost, part: fuzzStream}
		if err := m.recover(ctx); err != nil {
			t.Fatalf("joining with a positions item of key %q: %v", key, err)
		}
		if n, ok := strings.CutPrefix(key, prefixPos); ok {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && i <= 1<<20 && m.posVersions[i] != stored.Version {
				t.Fatalf("chunk %q (version %d) taken for version %d", key, stored.Version, m.posVersions[i])
			}
		}
	})
}
