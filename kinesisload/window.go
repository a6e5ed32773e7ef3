package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/scan"
)

// This file is the Loader's batching for the destination: the pages of a
// shard (or, for a [MultiSink], of every shard) accumulate in a window
// until it closes (Config.MaxBatchRecords, MaxBatchBytes, MaxBatchWait),
// and each window is delivered as one batch per shard and committed once
// per shard. Without any of those settings and without a MultiSink the
// consume loop delivers page by page (consume.go) and nothing here runs.
//
// A windower owns the windows: one per shard's loop, or one per session
// for a MultiSink. The consume loops add pages to its open window and go
// on reading; its goroutine delivers the open window when it closes, one
// window at a time, while the next one fills. A shard's pages are in at
// most two windows (the one being delivered, the open one), in shard
// order, so its batches are delivered in order and never concurrently.
// When the open window is full (a bound reached) while the previous one is
// still being delivered, adding waits: the Sink sets the pace.
//
// Pages in windows keep their share of the buffer budget
// (Config.MaxBufferedBytes) until their window is delivered; while they
// wait in the open window they are parked (budget.park), and a reader
// that could not read on before they are given back closes the window
// early (WindowBudget) rather than wait for its bound or its wait.

// WindowReason says what closed a window of batches (see
// Config.MaxBatchWait and [MultiSink]). Its String (and MarshalText) is a
// short lower-case name, stable for metric attributes.
type WindowReason uint8

// The reasons a window closes.
const (
	// WindowUnknown is not used by the Loader.
	WindowUnknown WindowReason = iota
	// WindowRecords: it held Config.MaxBatchRecords records.
	WindowRecords
	// WindowBytes: it held Config.MaxBatchBytes bytes.
	WindowBytes
	// WindowWait: Config.MaxBatchWait passed since its oldest record was
	// read (at once with MaxBatchWait 0).
	WindowWait
	// WindowBudget: reading could not go on within
	// Config.MaxBufferedBytes until the window's pages were given back:
	// it closed early. Raise MaxBufferedBytes if it is frequent.
	WindowBudget
	// WindowShardEnd: it held a shard's last records, committed with the
	// shard's end so that its children can be read.
	WindowShardEnd
	// WindowStop: the Loader stopped (Close, Pause, an error), or a shard
	// in it did (a handoff): it was delivered and committed first, as a
	// batch in flight is.
	WindowStop
)

var windowNames = [...]string{"unknown", "records", "bytes", "wait", "budget", "shard_end", "stop"}

// String returns the reason's name, as logs and JSON show it.
func (r WindowReason) String() string { return reasonName(windowNames[:], uint8(r), "WindowReason") }

// MarshalText implements [encoding.TextMarshaler]: the name of
// [WindowReason.String].
func (r WindowReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// windowCommitParallelism bounds the concurrent commits of one window's
// shards: the journal groups concurrent saves into one fsync.
const windowCommitParallelism = 32

// windowed reports whether the Loader batches pages in windows.
func (l *Loader) windowed() bool {
	return l.multi != nil || l.cfg.MaxBatchRecords > 0 || l.cfg.MaxBatchBytes > 0 || l.cfg.MaxBatchWait > 0
}

// windowPage is one page of a shard, decoded, on its way into a window.
type windowPage struct {
	records []Record
	bytes   int64 // data and partition keys
	// held is the page's share of the buffer budget, its decoded records'
	// included: the window gives it back once the page is delivered.
	held       int64
	checkpoint scan.Position
	end        bool
	draining   bool // the shard was DRAINING when the page was added
	behind     int64
	read       time.Time // when the consume loop took the page
}

// feed is one shard's loop as a windower knows it.
type feed struct {
	shard string
	lease Lease
	// parts are the shard's parts not finished yet, oldest first: in the
	// window being delivered, then in the open one.
	parts []*part
	// err is set once the shard failed in a window (its lease lost, the
	// Sink fenced it, a failure that stops Run): it takes no more pages.
	// fail is closed then.
	err  error
	fail chan struct{}
	// completed says the shard's SHARD_END is committed.
	completed bool
}

// part is one shard's pages in one window: one Batch.
type part struct {
	f          *feed
	records    []Record
	bytes      int64
	held       int64
	pages      int
	checkpoint scan.Position
	end        bool
	draining   bool
	behind     int64
	first      time.Time // when its first page was read
}

// batch is the part as the Sink receives it.
func (pt *part) batch(stream string) Batch {
	return Batch{Stream: stream, ShardID: pt.f.shard, Records: pt.records, Checkpoint: pt.checkpoint,
		MillisBehindLatest: pt.behind, Epoch: pt.f.lease.Epoch()}
}

// window is the pages of one or more shards delivered together.
type window struct {
	parts   map[*feed]*part
	order   []*part // in the order the shards joined the window
	records int
	bytes   int64
	held    int64
	pages   int
	opened  time.Time // when its oldest page was read
	due     WindowReason
}

// windower batches the pages of one shard, or of every shard of a session
// (multi), into windows and delivers them: see the top of this file.
type windower struct {
	s     *session
	l     *Loader
	multi bool
	// ctx is the context of deliveries and commits: the shard's hard
	// context (its lease lost, or a hard stop, cancels them), or for a
	// MultiSink the session's (a lost lease drops its shard's batch from
	// the window instead).
	ctx context.Context

	mu      sync.Mutex
	open    *window
	feeds   map[*feed]bool
	fatal   error         // a failure that stops Run: every feed has it
	changed chan struct{} // closed and replaced on every change a waiter may wait for
	wake    chan struct{} // pokes run (capacity 1)
	quit    chan struct{}
	done    chan struct{} // closed when run returned
}

// newWindower starts a windower delivering with ctx; stop it with stop.
func newWindower(s *session, ctx context.Context, multi bool) *windower {
	w := &windower{s: s, l: s.l, multi: multi, ctx: ctx, feeds: map[*feed]bool{},
		changed: make(chan struct{}), wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// stop ends run once every feed has left, and waits for it.
func (w *windower) stop() {
	close(w.quit)
	<-w.done
}

// broadcast wakes every waiter. Called with w.mu held.
func (w *windower) broadcast() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// poke wakes run.
func (w *windower) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// join registers a shard's loop.
func (w *windower) join(shard string, ls Lease) *feed {
	f := &feed{shard: shard, lease: ls, fail: make(chan struct{})}
	w.mu.Lock()
	w.feeds[f] = true
	if w.fatal != nil {
		w.failLocked(f, w.fatal)
	}
	w.mu.Unlock()
	return f
}

// leave unregisters a shard's loop: its pages in the open window are
// dropped (read again by whoever reads the shard next), and it waits
// until none of its pages is being delivered, so that the shard is never
// in two deliveries at once (the Loader may read it again at once).
func (w *windower) leave(f *feed) {
	w.mu.Lock()
	if pt := w.openPart(f); pt != nil {
		w.dropLocked(pt)
	}
	for len(f.parts) > 0 {
		ch := w.changed
		w.mu.Unlock()
		<-ch
		w.mu.Lock()
	}
	delete(w.feeds, f)
	w.mu.Unlock()
	w.poke()
}

// openPart returns f's part in the open window, or nil. Called with w.mu
// held.
func (w *windower) openPart(f *feed) *part {
	if w.open == nil {
		return nil
	}
	return w.open.parts[f]
}

// full reports whether win has reached a bound. Called with w.mu held.
func (w *windower) full(win *window) bool {
	c := &w.l.cfg
	return c.MaxBatchRecords > 0 && win.records >= c.MaxBatchRecords || c.MaxBatchBytes > 0 && win.bytes >= c.MaxBatchBytes
}

// add puts a page of f into the open window, waiting while the open
// window is full (its bound reached, the window before it still being
// delivered). On success the window owns pg.held; on an error (ctx ended,
// or f failed: f.err) the caller still does.
func (w *windower) add(ctx context.Context, f *feed, pg windowPage) error {
	w.mu.Lock()
	for {
		if f.err != nil {
			err := f.err
			w.mu.Unlock()
			return err
		}
		if w.open == nil || !w.full(w.open) {
			break
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	win := w.open
	if win == nil {
		win = &window{parts: map[*feed]*part{}, opened: pg.read}
		w.open = win
	}
	pt := win.parts[f]
	if pt == nil {
		pt = &part{f: f, first: pg.read}
		win.parts[f] = pt
		win.order = append(win.order, pt)
		f.parts = append(f.parts, pt)
	}
	if pt.records == nil {
		pt.records = pg.records
	} else {
		pt.records = append(pt.records, pg.records...)
	}
	pt.bytes += pg.bytes
	pt.held += pg.held
	pt.pages++
	pt.checkpoint, pt.end, pt.draining, pt.behind = pg.checkpoint, pg.end, pg.draining, pg.behind
	win.records += len(pg.records)
	win.bytes += pg.bytes
	win.held += pg.held
	win.pages++
	if pg.read.Before(win.opened) {
		win.opened = pg.read
	}
	if win.due == 0 {
		switch {
		case pg.end:
			win.due = WindowShardEnd
		case w.l.cfg.MaxBatchRecords > 0 && win.records >= w.l.cfg.MaxBatchRecords:
			win.due = WindowRecords
		case w.l.cfg.MaxBatchBytes > 0 && win.bytes >= w.l.cfg.MaxBatchBytes:
			win.due = WindowBytes
		}
	}
	w.l.buffered.park(pg.held)
	w.statsLocked(f)
	w.mu.Unlock()
	w.poke()
	return nil
}

// flush closes the open window if f has pages in it (WindowStop): a
// stopping shard's records are delivered and committed now.
func (w *windower) flush(f *feed) {
	w.mu.Lock()
	if w.openPart(f) != nil && w.open.due == 0 {
		w.open.due = WindowStop
	}
	w.mu.Unlock()
	w.poke()
}

// await waits until every page of f added so far is committed, and
// returns nil; or f's failure, or ctx.Err().
func (w *windower) await(ctx context.Context, f *feed) error {
	w.mu.Lock()
	for {
		if f.err != nil {
			err := f.err
			w.mu.Unlock()
			return err
		}
		if len(f.parts) == 0 {
			w.mu.Unlock()
			return nil
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
}

// run delivers the open window each time it closes, until stop.
func (w *windower) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		win := w.open
		if win != nil && len(win.order) == 0 {
			w.open, win = nil, nil // every shard of it left
		}
		if win != nil {
			if win.due == 0 {
				switch {
				case !time.Now().Before(win.opened.Add(w.l.cfg.MaxBatchWait)):
					win.due = WindowWait
				case w.l.buffered.isStarved():
					win.due = WindowBudget
				}
			}
			if win.due != 0 {
				w.open = nil
				w.broadcast() // room for the pages that waited
				w.mu.Unlock()
				w.l.buffered.unpark(win.held)
				w.deliver(win, time.Now())
				continue
			}
		}
		var timer <-chan time.Time
		var starved <-chan struct{}
		var t *time.Timer
		if win != nil {
			t = time.NewTimer(time.Until(win.opened.Add(w.l.cfg.MaxBatchWait)))
			timer, starved = t.C, w.l.buffered.starved()
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-timer:
		case <-starved:
		case <-w.quit:
			if t != nil {
				t.Stop()
			}
			w.mu.Lock()
			if w.open != nil {
				for _, pt := range slices.Clone(w.open.order) {
					w.dropLocked(pt)
				}
			}
			w.mu.Unlock()
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}

// deliver delivers win (closed at closed), commits its shards and
// reports it.
func (w *windower) deliver(win *window, closed time.Time) {
	var parts []*part
	var calls int
	var err error
	if w.multi {
		parts, calls, err = w.deliverMulti(win)
	} else {
		parts, calls, err = w.deliverOne(win)
	}
	if err != nil {
		for _, pt := range parts {
			w.finish(pt, err, false)
		}
		if _, fatal := errors.AsType[*RunError](err); fatal {
			w.setFatal(err)
		}
		return
	}
	w.commit(win, parts, calls, closed)
}

// deliverOne delivers the window of one shard's loop as [consumer.deliver]
// delivers a page: a plain Sink gets no batch without records. It returns
// the parts delivered, the calls it took, and the failure of them all.
func (w *windower) deliverOne(win *window) ([]*part, int, error) {
	pt := win.order[0]
	b := pt.batch(w.l.cfg.Stream)
	if len(b.Records) == 0 && w.l.tx == nil {
		return win.order, 0, nil
	}
	calls, err := w.s.deliverRetrying(w.ctx, b, pt.f.lease)
	return win.order, calls, err
}

// deliverMulti delivers a window of many shards with the Sink's
// DeliverMulti, retrying as deliverRetrying does. Before every call it
// drops the parts of shards whose lease is lost; after a refusal that
// names fenced shards ([*ShardsFencedError]) it drops theirs, as lost
// leases of reason [LostSinkFenced], and delivers the rest again at once.
// It returns the parts still to commit, the calls it took, and the
// failure of them all.
func (w *windower) deliverMulti(win *window) ([]*part, int, error) {
	l := w.l
	parts := slices.Clone(win.order)
	slices.SortFunc(parts, func(a, b *part) int { return strings.Compare(a.f.shard, b.f.shard) })
	policy := l.sinkPolicy()
	calls, failures := 0, 0
	for {
		parts = slices.DeleteFunc(parts, func(pt *part) bool {
			if err := leaseGone(l.cfg.Stream, pt.f.lease); err != nil {
				w.finish(pt, err, false)
				return true
			}
			return false
		})
		var batches []Batch
		for _, pt := range parts {
			if b := pt.batch(l.cfg.Stream); len(b.Records) > 0 || l.tx != nil {
				batches = append(batches, b)
			}
		}
		if len(batches) == 0 {
			return parts, calls, nil
		}
		slot, err := l.deliveries.acquire(w.ctx, 1)
		if err != nil {
			return parts, calls, err
		}
		calls++
		err = deliverMultiSafely(w.ctx, l.multi, batches)
		l.deliveries.release(slot)
		if err == nil {
			return parts, calls, nil
		}
		if errors.Is(err, ErrLeaseLost) {
			ids, ok := fencedShards(batches, err)
			if !ok {
				return parts, calls, &RunError{Stream: l.cfg.Stream, Shard: batches[0].ShardID, Op: "Deliver", Kind: ErrSink,
					Err: fmt.Errorf("the sink refused %s as delivered under a lost lease without naming its shards (a MultiSink names them with a *kinesisload.ShardsFencedError): %w", describeWindow(batches), err)}
			}
			for _, id := range ids {
				i := slices.IndexFunc(parts, func(pt *part) bool { return pt.f.shard == id })
				lost := sinkFenced(parts[i].batch(l.cfg.Stream), err)
				if _, fatal := lost.(*RunError); fatal {
					return parts, calls, lost
				}
				w.finish(parts[i], lost, false)
				parts = slices.Delete(parts, i, i+1)
			}
			continue
		}
		if w.ctx.Err() != nil {
			return parts, calls, w.ctx.Err()
		}
		failures++
		if permanent(err) || l.sinkRetriesExhausted(failures) {
			return parts, calls, sinkGaveUp(l.cfg.Stream, batches[0].ShardID, describeWindow(batches), failures, err)
		}
		wait := policy.Delay(failures)
		l.retried("", "Deliver", failures, wait, err)
		if err := backoff.Sleep(w.ctx, wait); err != nil {
			return parts, calls, err
		}
	}
}

// leaseGone returns why ls, a lease of stream, may not be delivered under
// any more (see [LeaseChecker]), or nil.
func leaseGone(stream string, ls Lease) error {
	if err := checkLease(ls); err != nil {
		return err
	}
	select {
	case <-ls.Lost():
		if err := ls.Err(); err != nil {
			return err
		}
		return &LeaseLostError{Stream: stream, Shard: ls.Shard(), Epoch: ls.Epoch(), Reason: "lost"}
	default:
		return nil
	}
}

// describeWindow names a window's batches for an error: its shards (the
// first few) with their checkpoints, and its records.
func describeWindow(batches []Batch) string {
	const named = 5
	var b strings.Builder
	records := 0
	for i, x := range batches {
		records += len(x.Records)
		if i < named {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s ending at %v", x.ShardID, x.Checkpoint)
		}
	}
	if len(batches) > named {
		fmt.Fprintf(&b, " and %d more", len(batches)-named)
	}
	return fmt.Sprintf("the window of %d batches (%d records; shard %s)", len(batches), records, b.String())
}

// commit commits the checkpoint of every part of win the Sink stored, one
// per shard (concurrently, within windowCommitParallelism), then reports
// the batches and the window to the hooks.
func (w *windower) commit(win *window, parts []*part, calls int, closed time.Time) {
	l := w.l
	errs := make([]error, len(parts))
	g := errgroup.Group{}
	g.SetLimit(windowCommitParallelism)
	for i, pt := range parts {
		g.Go(func() error {
			u := ShardProgress{ShardID: pt.f.shard, Position: pt.checkpoint}
			if pt.end {
				u.State = StateCompleted
			}
			from := StateActive
			if pt.draining {
				from = StateDraining
			}
			errs[i] = w.s.saveShard(w.ctx, pt.f.lease, u, from)
			return nil
		})
	}
	_ = g.Wait()
	e := WindowDelivered{Stream: l.cfg.Stream, Reason: win.due, Age: closed.Sub(win.opened), Attempts: calls}
	var fatal error
	for i, pt := range parts {
		if err := errs[i]; err != nil {
			if _, isRun := errors.AsType[*RunError](err); isRun && fatal == nil {
				fatal = err
			}
			w.finish(pt, err, false)
			continue
		}
		if len(pt.records) > 0 {
			l.hooks.onDelivered(BatchDelivered{Stream: l.cfg.Stream, ShardID: pt.f.shard, Records: len(pt.records), Bytes: pt.bytes,
				MillisBehindLatest: pt.behind, Latency: time.Since(pt.first), Attempts: max(calls, 1), Waited: closed.Sub(pt.first)})
		}
		e.Shards++
		e.Records += len(pt.records)
		e.Bytes += pt.bytes
		e.Pages += pt.pages
		w.finish(pt, nil, pt.end)
	}
	if e.Shards > 0 {
		e.Latency = time.Since(closed)
		l.hooks.onWindow(e)
		l.stats.windowDelivered(e.Reason)
	}
	if fatal != nil {
		w.setFatal(fatal)
	}
}

// finish ends pt: delivered and committed (err nil), or failed with err,
// which f takes as its failure unless it has one. Its budget is given back.
func (w *windower) finish(pt *part, err error, completed bool) {
	w.l.buffered.release(pt.held)
	w.mu.Lock()
	defer w.mu.Unlock()
	f := pt.f
	f.parts = slices.DeleteFunc(f.parts, func(x *part) bool { return x == pt })
	if err != nil {
		w.failLocked(f, err)
	}
	if completed {
		f.completed = true
	}
	w.statsLocked(f)
	w.broadcast()
}

// failLocked sets f's failure, if it has none, drops its pages from the
// open window, and wakes its loop. Called with w.mu held.
func (w *windower) failLocked(f *feed, err error) {
	if f.err != nil {
		return
	}
	f.err = err
	close(f.fail)
	if pt := w.openPart(f); pt != nil {
		w.dropLocked(pt)
	}
}

// setFatal fails every shard with err, a failure that stops Run.
func (w *windower) setFatal(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal == nil {
		w.fatal = err
	}
	for f := range w.feeds {
		w.failLocked(f, err)
	}
	w.broadcast()
}

// dropLocked removes pt from the open window and gives its budget back.
// Called with w.mu held.
func (w *windower) dropLocked(pt *part) {
	win := w.open
	delete(win.parts, pt.f)
	win.order = slices.DeleteFunc(win.order, func(x *part) bool { return x == pt })
	win.records -= len(pt.records)
	win.bytes -= pt.bytes
	win.held -= pt.held
	win.pages -= pt.pages
	if len(win.order) > 0 {
		win.opened = slices.MinFunc(win.order, func(a, b *part) int { return a.first.Compare(b.first) }).first
	}
	w.l.buffered.unpark(pt.held)
	w.l.buffered.release(pt.held)
	pt.f.parts = slices.DeleteFunc(pt.f.parts, func(x *part) bool { return x == pt })
	w.statsLocked(pt.f)
	w.broadcast()
}

// statsLocked tells [Loader.Stats] what f has in windows. Called with
// w.mu held.
func (w *windower) statsLocked(f *feed) {
	records := 0
	var bytes int64
	var since time.Time
	for _, pt := range f.parts {
		records += len(pt.records)
		bytes += pt.bytes
		if since.IsZero() || pt.first.Before(since) {
			since = pt.first
		}
	}
	if !since.IsZero() {
		// On the clock of Stats (WithClock), as old as it is on ours.
		since = w.l.stats.clock().Add(-time.Since(since))
	}
	w.l.stats.windowed(f.shard, records, bytes, since)
}

// runWindowed is the consume loop of a shard whose pages go into windows
// (see [Loader.windowed]): the reader's pages, decoded, are added to the
// shard's windower (or the session's, for a MultiSink) and the loop reads
// on. It returns as [consumer.run] does: true once the shard's end is
// committed; false, nil after a graceful stop, once what the shard had in
// windows is committed; or the failure.
func (c *consumer) runWindowed(gctx, hctx context.Context, pages <-chan page, readErr <-chan error) (completed bool, err error) {
	l := c.s.l
	w := c.windows
	if w == nil {
		w = newWindower(c.s, hctx, false)
		defer w.stop()
	}
	f := w.join(c.shard, c.lease)
	defer w.leave(f)
	for {
		var p page
		var ok bool
		select {
		case p, ok = <-pages:
		case <-f.fail:
			return false, f.err
		}
		if !ok {
			break
		}
		read := time.Now()
		var bounded bool
		p, bounded = c.s.cutAtBound(gctx, c.shard, p)
		if len(p.records) == 0 && !p.end {
			// Config.StopAt's empty pages at the tip (stopat.go).
			l.buffered.release(p.held)
			if bounded {
				return c.windowsAtBound(hctx, w, f)
			}
			continue
		}
		if p.end && !c.draining {
			if err := c.s.saveShard(hctx, c.lease, ShardProgress{ShardID: c.shard, State: StateDraining}, StateActive); err != nil {
				l.buffered.release(p.held)
				return false, err
			}
			c.draining = true
		}
		if len(p.children) > 0 {
			select {
			case c.hint <- struct{}{}:
			default:
			}
		}
		pg := windowPage{end: p.end, draining: c.draining, behind: p.millisBehind, read: read}
		pg.records, pg.bytes = c.dec.decode(p.records)
		// As in deliver: the decoded records' cost, beyond the page's.
		extra := decodedCost(len(p.records), pg.records)
		l.buffered.force(extra)
		pg.held = p.held + extra
		if p.end {
			pg.checkpoint = scan.ShardEnd()
		} else {
			pg.checkpoint = scan.AfterSequence(lastSequence(p.records))
		}
		if err := w.add(hctx, f, pg); err != nil {
			l.buffered.release(pg.held)
			return false, err
		}
		if p.end {
			if err := w.await(hctx, f); err != nil {
				return false, err
			}
			l.log.Info("shard completed", "shard", c.shard)
			return true, nil
		}
		if bounded {
			return c.windowsAtBound(hctx, w, f)
		}
		if gctx.Err() != nil {
			break // stop once what the shard has in windows is committed
		}
	}
	if gctx.Err() == nil {
		if err := <-readErr; err != nil {
			return false, stopError(l.cfg.Stream, c.shard, "GetRecords", ErrKinesis, err)
		}
		return false, nil
	}
	if hctx.Err() != nil {
		return false, nil // a hard stop: nothing more is committed
	}
	// A graceful stop: the shard's records in windows are delivered and
	// committed now, as a batch in flight is.
	w.flush(f)
	if err := w.await(hctx, f); err != nil && !(errors.Is(err, context.Canceled) && hctx.Err() != nil) {
		return false, err
	}
	return false, nil
}

// endWindows stops the session's windower once every loop has returned;
// after Run gave up on stuck loops (sealed) it does not wait for it.
func (s *session) endWindows(w *windower) {
	close(w.quit)
	if !s.sealed {
		<-w.done
	}
}
