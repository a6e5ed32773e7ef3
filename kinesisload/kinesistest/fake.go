package kinesistest

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// iteratorTTL is how long a shard iterator or a ListShards NextToken stays
// valid after it was issued.
const iteratorTTL = 300 * time.Second

// Request limits of the Kinesis API.
const (
	maxRecordSize       = 1 << 20  // data plus partition key of one record
	maxGetRecordsLimit  = 10000    // records per GetRecords call
	maxGetRecordsBytes  = 10 << 20 // bytes per GetRecords call
	maxPutRecordsCount  = 500      // records per PutRecords call
	maxPutRecordsBytes  = 5 << 20  // bytes per PutRecords call
	maxPartitionKeyLen  = 256      // characters in a partition key
	defaultListShards   = 1000     // shards per ListShards page by default
	maxListShardsResult = 10000    // largest MaxResults accepted
)

var (
	maxHashKey     = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))
	streamNameExpr = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)
)

// Fake is an in-memory Kinesis. The zero Fake is not usable; call [New].
// A Fake is safe for concurrent use and starts no goroutines, except one
// per open fan-out subscription ([Fake.SubscribeToShard]).
type Fake struct {
	cfg config
	key [32]byte // signs iterators and NextTokens, so forged ones are refused

	mu       sync.Mutex
	streams  map[string]*stream // by name
	byID     map[uint64]*stream
	nextID   uint64
	faults   []*faultEntry
	calls    map[Op]int
	faultSeq uint64
	fo       fanout // registered consumers (fanout.go)

	// past remembers, by name, the deleted streams, so that a stream
	// re-created under the same name is a new stream, as in Kinesis: a
	// later creation timestamp, and sequence numbers above every number
	// the deleted one handed out (Kinesis refuses them on the new shards).
	past map[string]pastStream
}

var _ API = (*Fake)(nil)

// New returns an empty in-memory Kinesis configured by opts. Without
// options it uses the real time, a retention of 24 hours and the real
// per-shard throughput limits ([DefaultLimits]).
func New(opts ...Option) *Fake {
	cfg := config{
		clock:      realClock{},
		retention:  DefaultRetention,
		limits:     DefaultLimits(),
		shardLimit: DefaultShardLimit,
		region:     DefaultRegion,
		account:    DefaultAccountID,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	f := &Fake{
		cfg:     cfg,
		streams: make(map[string]*stream),
		byID:    make(map[uint64]*stream),
		calls:   make(map[Op]int),
		past:    make(map[string]pastStream),
	}
	// crypto/rand.Read never returns an error on supported platforms.
	_, _ = rand.Read(f.key[:])
	return f
}

// now returns the fake's time, without a monotonic reading, in UTC.
func (f *Fake) now() time.Time {
	return f.cfg.clock.Now().Round(0).UTC()
}

type stream struct {
	id          uint64
	name        string
	arn         string
	created     time.Time
	shards      []*shard // index == shard number
	seq         uint64   // last sequence counter handed out
	lastArrival time.Time
}

// pastStream is what the fake keeps of a deleted stream.
type pastStream struct {
	created time.Time // its creation timestamp
	seq     uint64    // the last sequence counter it handed out
}

type shard struct {
	index    int
	id       string
	parent   string
	adjacent string
	lo, hi   *big.Int
	startSeq uint64
	endSeq   uint64 // 0 while open
	created  time.Time
	closed   time.Time // zero while open
	records  []record

	stats      ShardStats
	readCalls  []time.Time // times of the last accepted GetRecords calls
	iterCalls  []time.Time // times of the last issued iterators
	readBytes  bucket
	writeRecs  bucket
	writeBytes bucket
}

type record struct {
	seq     uint64
	key     string
	data    []byte
	arrival time.Time
}

func (r *record) size() int { return len(r.data) + len(r.key) }

func (s *shard) open() bool { return s.endSeq == 0 }

func shardID(i int) string { return fmt.Sprintf("shardId-%012d", i) }

// seqString formats sequence counter n of shard idx as a 56-digit decimal
// sequence number. The counter is in the high digits, so numbers grow with
// it; the shard index is in the low digits, so a number names its shard.
func seqString(n uint64, idx int) string {
	return fmt.Sprintf("49%036d%018d", n, idx)
}

// parseSeq reverses seqString.
func parseSeq(s string) (n uint64, idx int, ok bool) {
	if len(s) != 56 || !strings.HasPrefix(s, "49") {
		return 0, 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, 0, false
		}
	}
	var hi big.Int
	if _, ok := hi.SetString(s[2:38], 10); !ok || !hi.IsUint64() {
		return 0, 0, false
	}
	var lo big.Int
	if _, ok := lo.SetString(s[38:], 10); !ok || !lo.IsInt64() || lo.Int64() > 1<<31 {
		return 0, 0, false
	}
	return hi.Uint64(), int(lo.Int64()), true
}

func (st *stream) nextSeq() uint64 {
	st.seq++
	return st.seq
}

func (st *stream) addShard(lo, hi *big.Int, parent, adjacent string, now time.Time) *shard {
	idx := len(st.shards)
	s := &shard{
		index:    idx,
		id:       shardID(idx),
		parent:   parent,
		adjacent: adjacent,
		lo:       lo,
		hi:       hi,
		startSeq: st.nextSeq(),
		created:  now,
	}
	st.shards = append(st.shards, s)
	return s
}

func (st *stream) openShards() int {
	n := 0
	for _, s := range st.shards {
		if s.open() {
			n++
		}
	}
	return n
}

// gone reports whether shard s has left the stream: it was closed longer
// ago than the retention period, so every record it held has expired too.
func (f *Fake) gone(s *shard, now time.Time) bool {
	return !s.open() && s.closed.Add(f.cfg.retention).Before(now)
}

// trim drops the records of s that are older than the retention period.
func (f *Fake) trim(s *shard, now time.Time) {
	cutoff := now.Add(-f.cfg.retention)
	i := sort.Search(len(s.records), func(i int) bool { return !s.records[i].arrival.Before(cutoff) })
	if i > 0 {
		// Drop the payloads now; the array itself is freed when append
		// next grows it.
		clear(s.records[:i])
		s.records = s.records[i:]
	}
}

// lookupShard returns shard id of st, or a ResourceNotFoundException.
func (f *Fake) lookupShard(st *stream, id string, now time.Time) (*shard, error) {
	if n, ok := parseShardID(id); ok && n < len(st.shards) {
		s := st.shards[n]
		if !f.gone(s, now) {
			f.trim(s, now)
			return s, nil
		}
	}
	return nil, f.errShardNotFound(st.name, id)
}

// parseShardID returns n of a shard ID "shardId-" followed by 12 digits
// (shardID(n)). It is on the path of every read, so it parses by hand.
func parseShardID(id string) (int, bool) {
	digits, ok := strings.CutPrefix(id, "shardId-")
	if !ok || len(digits) != 12 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func (f *Fake) streamARN(name string) string {
	return fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", f.cfg.region, f.cfg.account, name)
}

// streamName picks the stream a request names by StreamName or StreamARN.
func (f *Fake) streamName(name, arn *string) (string, error) {
	var n, fromARN string
	if name != nil {
		n = *name
	}
	if arn != nil && *arn != "" {
		prefix := fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/", f.cfg.region, f.cfg.account)
		rest, ok := strings.CutPrefix(*arn, prefix)
		if !ok || rest == "" {
			return "", errInvalidArgument("StreamARN %s is not a stream ARN of account %s in %s", *arn, f.cfg.account, f.cfg.region)
		}
		fromARN = rest
	}
	switch {
	case n == "" && fromARN == "":
		return "", errInvalidArgument("StreamName or StreamARN must be provided")
	case n != "" && fromARN != "" && n != fromARN:
		return "", errInvalidArgument("StreamName %s and StreamARN %s name different streams", n, *arn)
	case n == "":
		n = fromARN
	}
	if !streamNameExpr.MatchString(n) {
		return "", errInvalidArgument("StreamName %q must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '-' and '.'", n)
	}
	return n, nil
}

// lookupStream returns the stream a request names; f.mu must be held.
func (f *Fake) lookupStream(name, arn *string) (*stream, error) {
	n, err := f.streamName(name, arn)
	if err != nil {
		return nil, err
	}
	st, ok := f.streams[n]
	if !ok {
		return nil, f.errStreamNotFound(n)
	}
	return st, nil
}

// openShardTotal counts the open shards of every stream; f.mu must be held.
func (f *Fake) openShardTotal() int {
	n := 0
	for _, st := range f.streams {
		n += st.openShards()
	}
	return n
}

// route returns the open shard of st whose hash-key range holds h.
func route(st *stream, h *big.Int) *shard {
	for _, s := range st.shards {
		if s.open() && s.lo.Cmp(h) <= 0 && h.Cmp(s.hi) <= 0 {
			return s
		}
	}
	return nil
}
