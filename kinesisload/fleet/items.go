package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// The table's layout. A stream's generation has a partition of its own
// (see partition), which holds its items: the initialisation item, the
// roster (every host's heartbeat, in one item), and one item per shard.
// The stream's own partition (generation 0's) also holds the identity
// item, which names the generation in force. Each host's positions (the
// group commit of the positions it reached, written once a round) are in
// a partition of their own per host and generation (see posPartition), so
// that their writes do not load the stream's partition key.
//
// The names and encodings of the identity, init and shard items are those
// of the tables kinesisload/dynamo wrote before the protocol moved here, so
// that such a table is read as it is. (Its hosts' heartbeat items,
// "host#<id>", are not written any more.)
const (
	keyIdentity = "identity"
	keyInit     = "init"
	keyRoster   = "roster"
	prefixShard = "shard#"
	prefixHost  = "host#" // heartbeats of an older version (read only)
	prefixPos   = "pos#"

	fieldBeats = "beats" // the roster's map: host → its beat
	fieldPos   = "pos"   // a positions chunk's map: shard → its position
	fieldPend  = "pend"  // a shard item's map: init batch token → progress
	fieldBeat  = "c"     // a host's first positions chunk: its heartbeat counter

	// entryGen is the roster entry of a generation the fleet left: the
	// generation that replaced it.
	entryGen = "#gen"
)

func badItem(it Item, format string, args ...any) error {
	return fmt.Errorf("%w: %s/%s: %s", ErrBadItem, it.Partition, it.Key, fmt.Sprintf(format, args...))
}

// partition names the partition of stream's generation gen: the stream's
// name for generation 0 (as before generations existed), name#genN after
// N start-overs ('#' is in no stream name).
func partition(stream string, gen uint64) string {
	if gen == 0 {
		return stream
	}
	return fmt.Sprintf("%s#gen%d", stream, gen)
}

// posPartition names the partition of host's positions in the generation
// whose partition is part.
func posPartition(part, host string) string { return part + "#pos#" + host }

// epochBase is where the epochs of generation gen start: a lease of a
// later generation has an epoch above every one of the earlier (the
// seconds since 2000 until 2136, as epochFloor counts them, plus 2^24
// owner changes faster than one a second), so that the epoch grows across
// a start-over too, and a TransactionalSink fencing by it refuses a late
// batch of the old generation's owner.
func epochBase(gen uint64) uint64 { return gen << 32 }

// epochClock is the origin of epochFloor's clock.
var epochClock = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// epochFloor is the epoch a shard item created by a Save or an
// initialisation starts from, in generation gen at now: above the generation's base by
// the seconds since 2000 (until 2136). An item created then may be one
// deleted by hand and saved again (the Loader cannot tell it from a shard
// born since), whose earlier epochs are gone with it: a host that still
// holds a lease of the old item, and a TransactionalSink that stored its
// epoch, must see the new leases above it, not the same epochs again.
// A take sets an item's epoch one above, or to the floor of its time if
// higher: an item taken less than once a second since it was created
// stays below the floor of one created later, and an item whose epoch
// went back (restored from a backup) grants leases above the earlier.
func epochFloor(gen uint64, now time.Time) uint64 {
	s := now.Sub(epochClock) / time.Second
	if s < 0 {
		return epochBase(gen)
	}
	return epochBase(gen) + min(uint64(s), 1<<32-1<<24)
}

// createLead is how far ahead of its creator's clock a shard item's
// first epoch is: above the clock floors of takers whose clocks run
// ahead by less, so that an item created again (deleted by hand, or a
// second initialisation) starts above the leases they granted.
const createLead = 10 * time.Minute

// createEpoch is the epoch a shard item created at now starts from, in
// generation gen: epochFloor a createLead ahead.
func createEpoch(gen uint64, now time.Time) uint64 {
	return epochFloor(gen, now.Add(createLead))
}

func parseUint(it Item, field string) (uint64, error) {
	v := it.Field(field)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badItem(it, "attribute %s = %q: %v", field, v, err)
	}
	return n, nil
}

func parseTime(it Item, field string) (time.Time, error) {
	v := it.Field(field)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badItem(it, "attribute %s = %q: %v", field, v, err)
	}
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		// formatTime could not write it back in RFC 3339.
		return time.Time{}, badItem(it, "attribute %s = %q: year %d in UTC, outside 0000 to 9999", field, v, y)
	}
	return t, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// setField sets or (for "") removes a field.
func setField(it *Item, name, value string) {
	if value == "" {
		delete(it.Fields, name)
		return
	}
	if it.Fields == nil {
		it.Fields = map[string]string{}
	}
	it.Fields[name] = value
}

// Generation is one generation of a stream's progress in the table: the
// progress made on one stream of the name, from its initialisation until
// a host started the fleet over on a stream re-created under the name.
type Generation struct {
	// Gen counts the start-overs before it: 0 is the first.
	Gen uint64 `json:"gen"`
	// Identity is the stream the generation read (zero when it was
	// started over before an identity was stored).
	Identity kinesisload.StreamIdentity `json:"identity"`
	// ReplacedBy is the stream of the next generation; zero for the
	// current one.
	ReplacedBy kinesisload.StreamIdentity `json:"replaced_by"`
}

// identityItem is the stream's identity item: the identity of the stream
// the current generation reads, the generation, and the generations
// archived by start-overs.
type identityItem struct {
	item     Item
	id       kinesisload.StreamIdentity
	gen      uint64
	archived []Generation
	// t0 is generation 0's T0, written with the identity by the first
	// initialisation (a later generation's is StartOverT0 of its
	// identity): the init item, which holds it first, may be deleted by
	// hand, and a fleet that took a fresh T0 then would skip what arrived
	// since the first.
	t0 time.Time
}

func decodeIdentity(it Item) (identityItem, error) {
	ii := identityItem{item: it, id: kinesisload.StreamIdentity{ARN: it.Field("arn")}}
	if !it.Exists() {
		return ii, nil
	}
	var err error
	if ii.id.Created, err = parseTime(it, "created"); err != nil {
		return ii, err
	}
	if ii.gen, err = parseUint(it, "gen"); err != nil {
		return ii, err
	}
	if ii.t0, err = parseTime(it, "t0"); err != nil {
		return ii, err
	}
	if raw := it.Field("archived"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &ii.archived); err != nil {
			return ii, badItem(it, "attribute archived: %v", err)
		}
	}
	return ii, nil
}

func (ii identityItem) encode(stream string) Item {
	it := Item{Partition: stream, Key: keyIdentity, Version: ii.item.Version}
	setField(&it, "arn", ii.id.ARN)
	setField(&it, "created", formatTime(ii.id.Created))
	if ii.gen > 0 {
		setField(&it, "gen", strconv.FormatUint(ii.gen, 10))
	}
	if len(ii.archived) > 0 {
		b, _ := json.Marshal(ii.archived) // plain values: cannot fail
		setField(&it, "archived", string(b))
	}
	if !ii.t0.IsZero() && ii.gen == 0 {
		setField(&it, "t0", formatTime(ii.t0))
	}
	return it
}

// initItem is a generation's initialisation decision: the lock, the commit
// naming the batch whose pending positions are visible, and T0, the start
// time the first lock holder saved (kept by every later holder, so that a
// host taking over from one that died resolves LATEST at the first T0).
type initItem struct {
	item                 Item
	lockOwner, lockToken string
	committed            string
	t0                   time.Time
	// progress counts the holder's signs of progress under the lock
	// (see lockProgress): a holder whose count stands still for
	// Config.InitStallTimeout in another host's view loses the lock.
	progress uint64
	// identified says the stream's identity item existed when the
	// initialisation committed: its absence later is a deletion by hand
	// (see checkIdentityGone). Tables written before it was kept, and
	// users of the protocol that store no identity, do not set it.
	identified bool
}

func decodeInit(it Item) (initItem, error) {
	ii := initItem{item: it, lockOwner: it.Field("lockOwner"), lockToken: it.Field("lockToken"), committed: it.Field("committed"),
		identified: it.Field("identified") == "1"}
	var err error
	if ii.t0, err = parseTime(it, "t0"); err != nil {
		return ii, err
	}
	if ii.progress, err = parseUint(it, "progress"); err != nil {
		return ii, err
	}
	return ii, nil
}

func (ii initItem) encode(part string) Item {
	it := Item{Partition: part, Key: keyInit, Version: ii.item.Version}
	setField(&it, "lockOwner", ii.lockOwner)
	setField(&it, "lockToken", ii.lockToken)
	setField(&it, "committed", ii.committed)
	setField(&it, "t0", formatTime(ii.t0))
	if ii.progress > 0 {
		setField(&it, "progress", strconv.FormatUint(ii.progress, 10))
	}
	if ii.identified {
		setField(&it, "identified", "1")
	}
	return it
}

// shardItem is a shard's item: its owner and fencing epoch, a handoff
// request, its progress (lineage, state, and the position of its last
// release or state change: the owner's latest position is in its
// positions chunk), and the pending progress of initialisation batches.
type shardItem struct {
	id    string
	item  Item
	owner string
	epoch uint64
	// base is the epoch the item was created at, when that was its
	// epochFloor (0: at its generation's base, or written by a version
	// that did not keep it): its epoch is still base while it was never
	// owned.
	base    uint64
	handoff string
	prog    kinesisload.ShardProgress
	// pend holds the positions saved by initialisations, by batch
	// token; only the committed batch's count.
	pend map[string]kinesisload.ShardProgress
	// rate is the shard's rate in bytes/s when its owner released it
	// (balancing by throughput), to seed the next owner's.
	rate float64
	// rewind is the shard's last rewind as stored (JSON of a
	// kinesisload.Rewind; see rewind.go), kept by every write.
	rewind string
}

func (s *shardItem) exists() bool { return s.item.Exists() }

// visible is the item's progress as every host sees it, given the
// committed initialisation batch.
func (s *shardItem) visible(committed string) kinesisload.ShardProgress {
	p := s.prog
	if committed != "" {
		if q, ok := s.pend[committed]; ok {
			p = kinesisload.MergeProgress(p, q)
		}
	}
	p.ShardID = s.id
	p.Parents = slices.Clone(p.Parents)
	return p
}

// everOwned reports whether a host of generation gen ever owned the
// shard: its epoch moved from the one it was created at.
func (s *shardItem) everOwned(gen uint64) bool {
	return s.epoch != 0 && s.epoch != epochBase(gen) && s.epoch != s.base
}

// with returns a copy of s whose progress is p, the pending positions
// dropped once the committed batch is known (they are in p).
func (s *shardItem) with(p kinesisload.ShardProgress, committed string) *shardItem {
	n := *s
	n.prog = p
	if committed != "" {
		n.pend = nil
	}
	return &n
}

// maxRate is the highest rate, in bytes/s, taken from an item: far above
// what one shard can be read at (2 MiB/s a reader), so that only a rate
// edited by hand is set aside.
const maxRate = 1 << 30

// parseRate reads a shard's rate as its item or its owner's positions
// store it. A rate no shard can be read at (not a number, infinite,
// negative, above maxRate), which only a hand edit writes, is none: it
// would seed the next owner's meter, which forgets it by a sixtieth a
// second, and make that host the most loaded for hours, or for ever.
func parseRate(v string) (float64, error) {
	r, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	if !(r >= 0 && r <= maxRate) {
		return 0, nil
	}
	return r, nil
}

func shardID(key string) (string, bool) { return strings.CutPrefix(key, prefixShard) }

func decodeShard(it Item) (*shardItem, error) {
	id, _ := shardID(it.Key)
	s := &shardItem{id: id, item: it, owner: it.Field("owner"), handoff: it.Field("handoff"), rewind: it.Field("rewind")}
	var err error
	if s.epoch, err = parseUint(it, "epoch"); err != nil {
		return nil, err
	}
	if s.base, err = parseUint(it, "base"); err != nil {
		return nil, err
	}
	if v := it.Field("rate"); v != "" {
		if r, err := parseRate(v); err == nil {
			s.rate = r
		}
	}
	if raw := it.Field("prog"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &s.prog); err != nil {
			return nil, badItem(it, "attribute prog (the shard's progress): %v", err)
		}
	}
	s.prog.ShardID = id
	for tok, raw := range it.Maps[fieldPend] {
		var p kinesisload.ShardProgress
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return nil, badItem(it, "attribute pend[%s] (pending progress): %v", tok, err)
		}
		p.ShardID = id
		if s.pend == nil {
			s.pend = map[string]kinesisload.ShardProgress{}
		}
		s.pend[tok] = p
	}
	return s, nil
}

func (s *shardItem) encode(part string) Item {
	it := Item{Partition: part, Key: prefixShard + s.id, Version: s.item.Version}
	setField(&it, "epoch", strconv.FormatUint(s.epoch, 10))
	if s.base > 0 {
		setField(&it, "base", strconv.FormatUint(s.base, 10))
	}
	setField(&it, "owner", s.owner)
	setField(&it, "handoff", s.handoff)
	if s.rate > 0 {
		setField(&it, "rate", strconv.FormatFloat(s.rate, 'f', 0, 64))
	}
	prog, _ := json.Marshal(s.prog) // ShardProgress marshals always
	setField(&it, "prog", string(prog))
	setField(&it, "rewind", s.rewind)
	if len(s.pend) > 0 {
		m := make(map[string]string, len(s.pend))
		for tok, p := range s.pend {
			b, _ := json.Marshal(p)
			m[tok] = string(b)
		}
		it.Maps = map[string]map[string]string{fieldPend: m}
	}
	return it
}

// beat is a host's entry in the roster: its heartbeat counter, how many
// changes it made to the table (a host that sees it move reads the table
// again), what it balances by and the load it holds, whether it left,
// which shard items its latest changes wrote, and whether it may beat in
// its positions instead (see [member.beat]).
type beat struct {
	counter uint64
	changes uint64
	by      kinesisload.BalanceBy
	load    float64 // the sum of its shards' weights (BalanceByThroughput)
	left    bool
	hint    hint
	// chunked: the host may carry its heartbeat counter on its first
	// positions chunk instead of this entry, and watches the others'
	// chunks. Written as "p=1"; versions before it ignore the field, and
	// a host whose entry lacks it makes every host beat in the roster.
	chunked bool
}

// hint names the shard items that the changes from..changes of a host
// wrote (all: some change wrote something else, or too many to name): a
// host that saw every change before from reads only those items, not the
// whole partition. A host keeps its hint for a few rounds after its last
// change (every other host reads the roster every round), then drops it:
// the roster stays small.
type hint struct {
	from uint64 // 0: no hint
	all  bool
	ids  []string // sorted
}

// maxHintIDs is the most shard IDs a hint names; a change that would
// name more makes it all.
const maxHintIDs = 16

// covers reports whether h names every item written by the changes after
// seen, up to the entry's.
func (h hint) covers(seen uint64) bool {
	return h.from != 0 && !h.all && h.from <= seen+1
}

// String encodes h as the value of a beat's "h" field: from, a colon, and
// the shard IDs (a Kinesis shard ID by its number without leading zeros,
// any other with a leading '~'), or '*'.
func (h hint) String() string {
	if h.all {
		return fmt.Sprintf("%d:*", h.from)
	}
	enc := make([]string, len(h.ids))
	for i, id := range h.ids {
		enc[i] = encodeHintID(id)
	}
	return fmt.Sprintf("%d:%s", h.from, strings.Join(enc, ","))
}

func encodeHintID(id string) string {
	if n, ok := strings.CutPrefix(id, "shardId-"); ok && len(n) == 12 && strings.Trim(n, "0123456789") == "" {
		if t := strings.TrimLeft(n, "0"); t != "" {
			return t
		}
		return "0"
	}
	return "~" + id
}

// hintable reports whether id can be named in a hint: a beat is split
// at any white space, its hint at ',' and ':', and '*' names every item.
func hintable(id string) bool {
	return id != "" && !strings.ContainsAny(id, ",:*") && !strings.ContainsFunc(id, unicode.IsSpace)
}

func parseHint(v string) (hint, error) {
	from, ids, ok := strings.Cut(v, ":")
	if !ok {
		return hint{}, fmt.Errorf("%q has no ':'", v)
	}
	var h hint
	var err error
	if h.from, err = strconv.ParseUint(from, 10, 64); err != nil {
		return hint{}, err
	}
	if ids == "*" {
		h.all = true
		return h, nil
	}
	for e := range strings.SplitSeq(ids, ",") {
		if raw, ok := strings.CutPrefix(e, "~"); ok {
			h.ids = append(h.ids, raw)
			continue
		}
		n, err := strconv.ParseUint(e, 10, 64)
		if err != nil || n > 999_999_999_999 {
			return hint{}, fmt.Errorf("shard %q is neither a number nor ~ID", e)
		}
		h.ids = append(h.ids, fmt.Sprintf("shardId-%012d", n))
	}
	return h, nil
}

func (b beat) String() string {
	s := fmt.Sprintf("c=%d v=%d", b.counter, b.changes)
	if b.by != kinesisload.BalanceByCount {
		s += fmt.Sprintf(" b=%d", b.by)
	}
	if w := strconv.FormatFloat(b.load, 'f', 0, 64); b.load > 0 && w != "0" {
		s += " w=" + w // whole bytes a second: under half of one is none
	}
	if b.left {
		s += " left"
	}
	if b.hint.from != 0 {
		s += " h=" + b.hint.String()
	}
	if b.chunked {
		s += " p=1"
	}
	return s
}

func parseBeat(v string) (beat, error) {
	var b beat
	for f := range strings.FieldsSeq(v) {
		if f == "left" {
			b.left = true
			continue
		}
		k, val, ok := strings.Cut(f, "=")
		if !ok {
			return b, fmt.Errorf("beat %q: %q is not key=value", v, f)
		}
		var err error
		switch k {
		case "c":
			b.counter, err = strconv.ParseUint(val, 10, 64)
		case "v":
			b.changes, err = strconv.ParseUint(val, 10, 64)
		case "b":
			var n int
			n, err = strconv.Atoi(val)
			b.by = kinesisload.BalanceBy(n)
		case "w":
			b.load, err = strconv.ParseFloat(val, 64)
			if !(b.load >= 0 && b.load <= math.MaxFloat64) {
				b.load = 0 // NaN, infinite or negative: edited by hand
			}
		case "h":
			b.hint, err = parseHint(val)
		case "p":
			b.chunked = val == "1"
		}
		if err != nil {
			return b, fmt.Errorf("beat %q: %s: %v", v, k, err)
		}
	}
	return b, nil
}

// roster is the roster item decoded: every host's beat, and the
// generation that replaced this one (0: none).
type roster struct {
	beats map[string]beat
	raw   map[string]string // the entries as stored, for conditions
	// bad holds the entries that do not decode (edited by hand), by
	// host: such a host is as absent to the others, and writes over its
	// own entry (raw holds it) at its next beat.
	bad  map[string]error
	next uint64
}

func decodeRoster(it Item) (roster, error) {
	r := roster{beats: map[string]beat{}, raw: map[string]string{}, bad: map[string]error{}}
	for host, v := range it.Maps[fieldBeats] {
		if host == entryGen {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return r, badItem(it, "entry %s = %q: %v", entryGen, v, err)
			}
			r.next = n
			continue
		}
		r.raw[host] = v
		b, err := parseBeat(v)
		if err != nil {
			r.bad[host] = badItem(it, "host %s: %v", host, err)
			continue
		}
		r.beats[host] = b
	}
	return r, nil
}

// posEntry is one shard's entry in its owner's positions chunk: the lease
// epoch it was committed under, the position, and the shard's rate.
type posEntry struct {
	epoch uint64
	pos   scan.Position
	rate  float64
}

// String is the entry as its chunk stores it: "epoch position [rate]".
// A position after a sequence number, the one a busy shard commits, is
// written as the bare number (which [scan.Parse] reads as
// AFTER_SEQUENCE_NUMBER, as every version of this package has): the
// chunk of a busy host is written every round and costs its bytes, and
// the kind's name would be a fifth of them.
func (e posEntry) String() string {
	pos := e.pos.String()
	if e.pos.Kind == scan.KindAfterSequence {
		pos = e.pos.Sequence
	}
	s := strconv.FormatUint(e.epoch, 10) + " " + pos
	if e.rate > 0 {
		s += " " + strconv.FormatFloat(e.rate, 'f', 0, 64)
	}
	return s
}

func parsePosEntry(v string) (posEntry, error) {
	var e posEntry
	f := strings.Fields(v)
	if len(f) < 2 || len(f) > 3 {
		return e, fmt.Errorf("position %q: want \"epoch position [rate]\"", v)
	}
	var err error
	if e.epoch, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return e, fmt.Errorf("position %q: epoch: %v", v, err)
	}
	if e.pos, err = scan.Parse(f[1]); err != nil {
		return e, fmt.Errorf("position %q: %v", v, err)
	}
	if len(f) == 3 {
		if e.rate, err = parseRate(f[2]); err != nil {
			return e, fmt.Errorf("position %q: rate: %v", v, err)
		}
	}
	return e, nil
}

// decodePositions decodes the chunks of a host's positions partition:
// every entry that decodes, and for those that do not (edited by hand),
// an error naming each, wrapping ErrBadItem. A shard in two chunks (its
// entry left in one whose write failed, after it moved to another with a
// lease taken again) has the entry of the later lease, or the further
// position of one lease.
func decodePositions(items []Item) (map[string]posEntry, error) {
	out := map[string]posEntry{}
	var bad []error
	for _, it := range items {
		for shard, v := range it.Maps[fieldPos] {
			e, err := parsePosEntry(v)
			if err != nil {
				bad = append(bad, badItem(it, "shard %s: %v", shard, err))
				continue
			}
			if was, ok := out[shard]; !ok || laterEntry(e, was) {
				out[shard] = e
			}
		}
	}
	return out, errors.Join(bad...)
}

// laterEntry reports whether a was committed after b: under a later
// lease, or further along under the same one (a tie goes to a).
func laterEntry(a, b posEntry) bool {
	if a.epoch != b.epoch {
		return a.epoch > b.epoch
	}
	merged := kinesisload.MergeProgress(kinesisload.ShardProgress{Position: a.pos}, kinesisload.ShardProgress{Position: b.pos})
	bFurther := !a.pos.Equal(b.pos) && merged.Position.Equal(b.pos)
	return !bFurther
}

// positionsDecoded is decodePositions for the protocol: an entry that
// does not decode is left out, with a warning (its shard resumes from its
// item's position: records delivered again, none lost), so that no host
// stops over it. Tools refuse it instead (Inspect).
func (m *member) positionsDecoded(host string, items []Item) map[string]posEntry {
	entries, err := decodePositions(items)
	m.mu.Lock()
	warn := err != nil && m.posWarned[host] != err.Error()
	if err != nil {
		m.posWarned[host] = err.Error() // once per host and value: steals read them every round
	} else {
		delete(m.posWarned, host)
	}
	m.mu.Unlock()
	if warn {
		m.c.cfg.Logger.Warn("fleet: a host's positions hold entries that do not decode (edited by hand?): their shards resume from their items' positions",
			"stream", m.stream, "host", host, "err", err)
	}
	return entries
}
