package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// errKilled is what a dead process's calls get, and what it hears of a
// call that was under way when it died: nothing it sends after its death
// arrives, and no answer reaches it.
var errKilled = errors.New("sim: the process was killed")

// A proc is one run of one host: a process that starts a Loader, and may
// be killed (SIGKILL: from that instant nothing it sends arrives), paused
// (SIGSTOP: its calls wait; a write whose caller gave up lands when the
// pause ends, as a delayed packet does), or stopped gracefully (Close).
//
// Every dependency the Loader has on the world goes through the proc's
// gate: the Kinesis client, the Sink, the fleet's table and the journal.
type proc struct {
	w    *world
	slot *slot
	name string // "h1.3": slot 1, its third process
	host string // the fleet's HostID

	cfg    kinesisload.Config
	loader *kinesisload.Loader
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned and the process is cleaned up
	began  time.Time     // when Run was called

	table   *fleet.FaultyTable // fleet: this host's view of the table
	journal *journal.FileJournal
	segment string // single host: the newest segment file, for tail damage
	acked   int64  // its size after the last acknowledged Append

	mu       sync.Mutex
	dead     bool
	stopping bool          // Close was called: a graceful stop
	pause    chan struct{} // non-nil while paused; closed when the pause ends
	kills    []killPoint   // armed kill points
	calls    map[string]int
	runErr   error
	damage   bool // damage the journal's tail after the kill
	tableOut time.Time
	tableLag struct {
		d     time.Duration
		until time.Time
	}
	sinkFail struct {
		rate  float64
		after bool // the Sink stores the batch, then the answer fails
		until time.Time
	}
	sinkFailed bool // a Sink fault was ever in force (handoff.go)
}

// A killPoint kills the process at the n-th call of op from when it was
// armed: before the call has any effect, or (after) once it had it and
// before its answer arrives.
type killPoint struct {
	op    string
	n     int
	after bool
}

// kill makes the process dead at once: every call it makes from now on
// fails, and nothing it sends arrives. It does not wait for the Loader's
// goroutines to end (they may be the caller); the proc's runner cleans up.
func (p *proc) kill(why string) {
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return
	}
	p.dead = true
	if p.pause != nil {
		close(p.pause)
		p.pause = nil
	}
	p.mu.Unlock()
	p.w.mu.Lock()
	p.w.disturb() // its release's write may be lost (handoff.go)
	p.w.mu.Unlock()
	p.w.logf("%s killed (%s)", p.name, why)
	if p.table != nil {
		p.table.Kill()
	}
	p.cancel()
}

func (p *proc) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// setPaused pauses or resumes the process.
func (p *proc) setPaused(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.dead:
	case on && p.pause == nil:
		p.pause = make(chan struct{})
	case !on && p.pause != nil:
		close(p.pause)
		p.pause = nil
	}
}

// arm adds a kill point.
func (p *proc) arm(k killPoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kills = append(p.kills, k)
}

// count counts a call of op and reports whether a kill point fires on
// it, and when.
func (p *proc) count(op string) (fire, after bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[op]++
	for i, k := range p.kills {
		if k.op != op {
			continue
		}
		p.kills[i].n--
		if p.kills[i].n <= 0 {
			p.kills = slices.Delete(p.kills, i, i+1)
			return true, k.after
		}
		return false, false
	}
	return false, false
}

// call runs fn as the process's call op: it fails at once when the process
// is dead, waits while it is paused, fires kill points, and hides fn's
// answer when the process died while fn ran. A write (landsLate) whose
// caller stops waiting during a pause is still sent when the pause ends.
func (p *proc) call(ctx context.Context, op string, landsLate bool, fn func(context.Context) error) error {
	p.mu.Lock()
	dead, pause := p.dead, p.pause
	p.mu.Unlock()
	if dead {
		return errKilled
	}
	if pause != nil {
		select {
		case <-pause:
		case <-ctx.Done():
			if landsLate {
				p.w.detach(func() {
					<-pause
					if !p.isDead() { // a killed process's connections are gone
						_ = fn(context.WithoutCancel(ctx))
					}
				})
			}
			return ctx.Err()
		}
		if p.isDead() {
			return errKilled
		}
	}
	fire, after := p.count(op)
	if fire && !after {
		p.kill("at " + op)
		return errKilled
	}
	err := fn(ctx)
	if fire {
		p.kill("after " + op)
		return errKilled
	}
	if p.isDead() {
		return errKilled
	}
	return err
}

// client is the Kinesis client of a process: the world's Kinesis, with the
// world's Kinesis faults, through the process's gate.
type client struct{ p *proc }

var (
	_ scan.Client            = client{}
	_ kinesisload.Subscriber = client{}
)

// kcall runs one Kinesis call of the process.
func kcall[In, Out any](c client, ctx context.Context, op string, shard func() string, in In, fn func(context.Context, In, ...func(*kinesis.Options)) (Out, error)) (Out, error) {
	var out Out
	err := c.p.call(ctx, "kinesis."+op, false, func(ctx context.Context) error {
		var sh string
		if shard != nil {
			sh = shard()
		}
		f := c.p.w.kinesisFault(op, sh)
		if f.delay > 0 {
			t := time.NewTimer(f.delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if f.before != nil {
			return f.before
		}
		var err error
		out, err = fn(ctx, in)
		if err == nil && f.after != nil {
			return f.after
		}
		if err == nil && f.odd != nil {
			f.odd(any(in), any(out))
		}
		return err
	})
	if err != nil {
		var zero Out
		return zero, err
	}
	return out, nil
}

func (c client) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return kcall(c, ctx, "ListShards", nil, in, c.p.w.fake.ListShards)
}

func (c client) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return kcall(c, ctx, "GetShardIterator", func() string { return deref(in.ShardId) }, in, c.p.w.fake.GetShardIterator)
}

func (c client) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return kcall(c, ctx, "GetRecords", nil, in, c.p.w.fake.GetRecords)
}

func (c client) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return kcall(c, ctx, "DescribeStreamSummary", nil, in, c.p.w.fake.DescribeStreamSummary)
}

func (c client) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	return kcall(c, ctx, "RegisterStreamConsumer", nil, in, c.p.w.fake.RegisterStreamConsumer)
}

func (c client) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	return kcall(c, ctx, "DescribeStreamConsumer", nil, in, c.p.w.fake.DescribeStreamConsumer)
}

func (c client) DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error) {
	return kcall(c, ctx, "DeregisterStreamConsumer", nil, in, c.p.w.fake.DeregisterStreamConsumer)
}

func (c client) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, _ ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	return kcall(c, ctx, "SubscribeToShard", func() string { return deref(in.ShardId) }, in, c.p.w.fake.SubscribeToShard)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sink is the Sink of a process: the world's destination (a plain Sink
// that keeps everything, or the transactional sinktest.Memory), through
// the process's gate, with the Sink faults of the schedule. Every batch
// it is given goes into the ledger with its outcome.
type sink struct{ p *proc }

// txSink is sink for a TransactionalSink destination.
type txSink struct{ sink }

func (s sink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	return s.p.call(ctx, "sink.Deliver", true, func(ctx context.Context) error {
		rate, after := s.p.sinkFault()
		if rate > 0 && !after && s.p.w.chance(rate) {
			return fmt.Errorf("sim: the Sink failed (transient)")
		}
		err := s.p.w.deliver(ctx, s.p, b)
		if err == nil && rate > 0 && after && s.p.w.chance(rate) {
			return fmt.Errorf("sim: the Sink stored the batch but its answer was lost")
		}
		return err
	})
}

// multiSink and txMultiSink are sink and txSink for a MultiSink
// destination: the windows of every shard in one call.
type (
	multiSink   struct{ sink }
	txMultiSink struct{ txSink }
)

func (s multiSink) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	return s.p.deliverMulti(ctx, bs)
}

func (s txMultiSink) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	return s.p.deliverMulti(ctx, bs)
}

func (p *proc) deliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	return p.call(ctx, "sink.Deliver", true, func(ctx context.Context) error {
		rate, after := p.sinkFault()
		if rate > 0 && !after && p.w.chance(rate) {
			return fmt.Errorf("sim: the Sink failed (transient)")
		}
		err := p.w.deliverMulti(ctx, p, bs)
		if err == nil && rate > 0 && after && p.w.chance(rate) {
			return fmt.Errorf("sim: the Sink stored the batches but its answer was lost")
		}
		return err
	})
}

func (s txSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	var out map[string]scan.Position
	err := s.p.call(ctx, "sink.Checkpoints", false, func(ctx context.Context) (err error) {
		out, err = s.p.w.mem.Checkpoints(ctx, stream)
		return err
	})
	return out, err
}

// RewindCheckpoint makes the destination a [kinesisload.Rewinder]: an
// operator's rewind sets its checkpoint back.
func (s txSink) RewindCheckpoint(ctx context.Context, stream, shard string, to scan.Position, epoch uint64) error {
	return s.p.call(ctx, "sink.RewindCheckpoint", true, func(ctx context.Context) error {
		if err := s.p.w.mem.RewindCheckpoint(ctx, stream, shard, to, epoch); err != nil {
			return err
		}
		// Taken after the rewind: no batch stored after it is of an
		// earlier epoch (refused), so the cut is exact.
		n := len(s.p.w.mem.Stored(stream, shard))
		s.p.w.mu.Lock()
		s.p.w.sinkRewinds[shard] = append(s.p.w.sinkRewinds[shard], n)
		s.p.w.mu.Unlock()
		return nil
	})
}

func (p *proc) sinkFault() (rate float64, after bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !time.Now().Before(p.sinkFail.until) {
		return 0, false
	}
	return p.sinkFail.rate, p.sinkFail.after
}

// table is the fleet's table as a process sees it: its FaultyTable (kill,
// lost answers, false conflicts, throttles, failed reads) through the
// process's gate, with outages and latency of the schedule.
type table struct{ p *proc }

var _ fleet.Table = table{}

// Debugging aids of a replay: SIM_DEBUG_KEY logs every write of that
// table item, SIM_DEBUG_DATA every delivery of that record.
var (
	debugKey  = os.Getenv("SIM_DEBUG_KEY")
	debugData = os.Getenv("SIM_DEBUG_DATA")
)

func (t table) fault(ctx context.Context) error {
	t.p.mu.Lock()
	out, lag := t.p.tableOut, t.p.tableLag
	t.p.mu.Unlock()
	now := time.Now()
	if now.Before(out) {
		return fmt.Errorf("%w: sim: the table is unreachable", fleet.ErrUnknown)
	}
	if lag.d > 0 && now.Before(lag.until) {
		tm := time.NewTimer(lag.d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", fleet.ErrUnknown, ctx.Err())
		}
	}
	return nil
}

func (t table) tcall(ctx context.Context, op string, write bool, fn func(context.Context) error) error {
	err := t.p.call(ctx, "table."+op, write, func(ctx context.Context) error {
		if err := t.fault(ctx); err != nil {
			return err
		}
		return fn(ctx)
	})
	if errors.Is(err, errKilled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if !errors.Is(err, fleet.ErrUnknown) {
			err = fmt.Errorf("%w: %w", fleet.ErrUnknown, err)
		}
	}
	return err
}

func (t table) Get(ctx context.Context, partition, key string) (it fleet.Item, err error) {
	err = t.tcall(ctx, "Get", false, func(ctx context.Context) (err error) {
		it, err = t.p.table.Get(ctx, partition, key)
		return err
	})
	return it, err
}

func (t table) GetField(ctx context.Context, partition, key, field string) (it fleet.Item, err error) {
	err = t.tcall(ctx, "Get", false, func(ctx context.Context) (err error) {
		it, err = t.p.table.GetField(ctx, partition, key, field)
		return err
	})
	return it, err
}

func (t table) Query(ctx context.Context, partition string) (its []fleet.Item, err error) {
	err = t.tcall(ctx, "Query", false, func(ctx context.Context) (err error) {
		its, err = t.p.table.Query(ctx, partition)
		return err
	})
	return its, err
}

// answer holds the item a table write answers. A write whose caller
// stopped waiting (a pause, see proc.call) is still sent later, and sets
// its answer after the caller read it: the lock keeps that from racing.
type answer struct {
	mu sync.Mutex
	it fleet.Item
}

func (a *answer) set(it fleet.Item) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.it = it
}

func (a *answer) get() fleet.Item {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.it
}

func (t table) Put(ctx context.Context, in fleet.Item) (fleet.Item, error) {
	var ans answer
	err := t.tcall(ctx, "Put", true, func(ctx context.Context) error {
		it, err := t.p.table.Put(ctx, in)
		ans.set(it)
		if err == nil && in.Key == "init" && in.Field("t0") != "" {
			t.p.w.t0Written(in.Field("t0"), t.p.began)
		}
		if debugKey != "" && in.Key == debugKey {
			t.p.w.logf("DEBUG %s Put %s v%d %v %v: %v", t.p.name, in.Key, in.Version, in.Fields, in.Maps, err)
		}
		return err
	})
	return ans.get(), err
}

func (t table) Delete(ctx context.Context, partition, key string, version uint64) error {
	return t.tcall(ctx, "Delete", true, func(ctx context.Context) error {
		err := t.p.table.Delete(ctx, partition, key, version)
		if debugKey != "" && key == debugKey {
			t.p.w.logf("DEBUG %s Delete %s v%d: %v", t.p.name, key, version, err)
		}
		return err
	})
}

func (t table) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	var ans answer
	err := t.tcall(ctx, "SetEntry", true, func(ctx context.Context) error {
		it, err := t.p.table.SetEntry(ctx, partition, key, field, entry, old, value)
		ans.set(it)
		if debugKey != "" && key == debugKey {
			t.p.w.logf("DEBUG %s SetEntry %s/%s %s[%s] %q -> %q: %v", t.p.name, partition, key, field, entry, old, value, err)
		}
		return err
	})
	return ans.get(), err
}

// jrnl is the file journal of a single-host process through its gate. It
// notes the size of the newest segment after every acknowledged Append,
// so that tail damage after a kill touches only bytes never acknowledged.
type jrnl struct{ p *proc }

var _ journal.Journal = jrnl{}

func (j jrnl) Append(ctx context.Context, recs ...[]byte) (last uint64, err error) {
	err = j.p.call(ctx, "journal.Append", true, func(ctx context.Context) (err error) {
		last, err = j.p.journal.Append(ctx, recs...)
		return err
	})
	if err == nil {
		j.p.w.durable(j.p)
		j.p.noteAcked()
	}
	return last, err
}

func (j jrnl) Replay(ctx context.Context, fn func(journal.Entry) error) error {
	return j.p.call(ctx, "journal.Replay", false, func(ctx context.Context) error { return j.p.journal.Replay(ctx, fn) })
}

func (j jrnl) Snapshot(ctx context.Context, index uint64, state []byte) error {
	return j.p.call(ctx, "journal.Snapshot", true, func(ctx context.Context) error { return j.p.journal.Snapshot(ctx, index, state) })
}

// Close does nothing: the process closes its journal when Run returned (a
// dead process's journal is closed by the operating system).
func (j jrnl) Close() error { return nil }

// noteAcked records the newest segment and its size.
func (p *proc) noteAcked() {
	segs, _ := filepath.Glob(filepath.Join(p.w.dir, "*.seg"))
	if len(segs) == 0 {
		return
	}
	slices.Sort(segs)
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if last != p.segment || fi.Size() > p.acked {
		p.segment, p.acked = last, fi.Size()
	}
}

// damageTail tears the newest segment's tail after the acknowledged bytes
// as a machine that lost power mid-write leaves it (the journal's crash
// model, see package journal): the file cut at a random point past them,
// or sometimes followed by zeros (pages allocated, never written). Disks
// write a 512-byte sector whole or not at all, so zeros start at a sector
// boundary, or at the acknowledged end when the sector holding it kept
// its old contents. (Zeros from inside a sector, which no crash leaves,
// made the journal refuse to open as it documents for damage: seed
// 50007289.)
func (p *proc) damageTail() {
	p.mu.Lock()
	seg, acked := p.segment, p.acked
	p.mu.Unlock()
	if seg == "" {
		return
	}
	fi, err := os.Stat(seg)
	if err != nil {
		return
	}
	size := fi.Size()
	cut := acked + int64(p.w.intn(int(size-acked)+1))
	zeros := 0
	if p.w.chance(0.5) {
		zeros = 1 + p.w.intn(2048)
		cut = max(acked, cut&^511)
	}
	err = os.Truncate(seg, cut)
	if err == nil && zeros > 0 {
		err = os.Truncate(seg, cut+int64(zeros)) // extends the file with zeros
	}
	if err != nil {
		p.w.failf("damage %s: %v", seg, err)
		return
	}
	p.w.logf("%s: journal tail torn: %s cut from %d to %d bytes (%d acknowledged), then %d zero bytes", p.name, filepath.Base(seg), size, cut, acked, zeros)
}
