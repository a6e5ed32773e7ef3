package journal

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatchBytes bounds how many bytes of frames the writer gathers into
// one write and fsync; a single larger append is still written whole.
const maxBatchBytes = 4 << 20

// FileJournal is the file [Journal], the embedded default: a directory of
// segment and snapshot files (see the package doc). Get one with [Open].
// Its methods are safe for concurrent use.
type FileJournal struct {
	dir  string
	cfg  Config
	lock *os.File

	reqs chan *appendReq
	done chan struct{} // closed when the writer goroutine exits

	gate   sync.RWMutex // Append (while handing off) and Snapshot hold it shared, Close exclusive
	closed bool         // guarded by gate

	snapMu sync.Mutex // one Snapshot at a time

	mu     sync.Mutex // guards the fields below
	segs   []segment  // live segments, oldest first; the last is the one appended to
	snap   *snapshotFile
	last   uint64 // index of the last durable record
	failed error  // set once a write or sync failed

	// Owned by the writer goroutine.
	active     *os.File
	activeSize int64
	buf        []byte

	rec      Recovery // what Open found; read-only after Open
	readOnly bool     // opened by OpenReadOnly: no writer, no active segment
	markLast uint64   // the repair mark's LastIndex while the mark exists; guarded by snapMu
	marked   bool     // a repair mark exists; guarded by snapMu

	fsyncs atomic.Int64 // number of segment fsyncs, for benchmarks
}

var _ Journal = (*FileJournal)(nil)

// appendReq is one Append call handed to the writer goroutine.
type appendReq struct {
	frames []byte // encoded frames, index 0, CRC field holding the data's CRC
	whole  []byte // room for a batch header, then frames: the batch of this call alone
	last   uint64 // set by the writer
	err    error  // set by the writer
	done   chan struct{}
}

// Open opens the file journal in dir, creating dir (mode 0700, and any
// missing parent) and an empty journal if needed, and locks the directory
// until Close. It checks every file: a torn tail of the newest segment (the
// last write of a crash, see the package doc) is truncated and reported by
// [FileJournal.Recovery]; any other damage returns a [*CorruptError]
// (wrapping [ErrCorrupt]). Open then makes what it read durable and starts
// a new segment, so that nothing is ever appended after bytes whose
// durability is unknown. A failed Open leaves an existing directory as it
// was, and removes the directories it created while they are empty (never
// when another Open holds the directory). A directory that is already
// open, in this process or another, returns an error wrapping [ErrLocked].
// cfg is validated first.
func Open(dir string, cfg Config) (*FileJournal, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	created, err := makeDir(dir)
	if err != nil {
		return nil, err
	}
	j, err := openLocked(dir, cfg)
	if err != nil {
		// Never after ErrLocked: the directory is another Open's, which
		// may have found it made by us a moment ago (it deleted the
		// winner's journal, acknowledged appends and all).
		if created != "" && !errors.Is(err, ErrLocked) {
			removeEmpty(dir, created)
		}
		return nil, err
	}
	go j.writer()
	return j, nil
}

// openLocked locks dir, loads it and prepares it for appends.
func openLocked(dir string, cfg Config) (*FileJournal, error) {
	lock, err := lockDir(dir, true)
	if err != nil {
		return nil, err
	}
	j, err := open(dir, cfg, lock)
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	return j, nil
}

func open(dir string, cfg Config, lock *os.File) (*FileJournal, error) {
	st, dmg, err := load(dir)
	if err != nil {
		return nil, err
	}
	if dmg != nil {
		return nil, dmg.err
	}
	mark, err := readRepairMark(dir)
	if err != nil {
		return nil, err
	}
	j := &FileJournal{
		dir:  dir,
		cfg:  cfg,
		lock: lock,
		reqs: make(chan *appendReq, 128),
		done: make(chan struct{}),
		segs: st.segs[st.covered:],
		snap: st.snap,
		last: st.last(),
		rec:  Recovery{Repaired: mark},
	}
	if mark != nil {
		j.marked, j.markLast = true, mark.LastIndex
	}
	// The directory is sound: finish what a crash interrupted.
	if st.torn {
		seg := &st.segs[len(st.segs)-1]
		j.rec.Torn = &TornTail{File: seg.path, Offset: seg.size, Bytes: seg.fileSize - seg.size, Reason: st.tornWhy}
		if err := truncateFile(seg.path, seg.size); err != nil {
			return nil, err
		}
	}
	if err := removeLeftovers(dir, st); err != nil {
		return nil, err
	}
	// Start a new segment unless the newest is an empty one of this
	// format. The newest segment may hold bytes that a failed fsync of an
	// earlier process left only in the page cache: sync them first, and
	// never append after them.
	if n := len(j.segs); n == 0 || j.segs[n-1].v1 || j.segs[n-1].size > int64(len(segmentMagic)) {
		seq := uint64(0)
		if n > 0 {
			if err := syncFile(j.segs[n-1].path); err != nil {
				return nil, err
			}
			seq = j.segs[n-1].name.seq + 1
		} else if len(st.segs) > 0 {
			seq = st.segs[len(st.segs)-1].name.seq + 1
		}
		seg, err := createSegment(dir, fileName{kind: kindSegment, seq: seq, index: j.last + 1})
		if err != nil {
			return nil, err
		}
		j.segs = append(j.segs, seg)
	} else if err := syncDir(dir); err != nil {
		// The empty newest segment is reused: its name may be the
		// rename of a createSegment killed before its syncDir, and an
		// append acknowledged in it must not vanish with the name.
		return nil, err
	}
	cur := j.segs[len(j.segs)-1]
	f, err := os.OpenFile(cur.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("journal: open segment: %w", err)
	}
	j.active, j.activeSize = f, cur.size
	return j, nil
}

// removeLeftovers removes what interrupted writes and compactions left:
// temporary files, older snapshots and segments the snapshot covers.
func removeLeftovers(dir string, st *dirState) error {
	changed := false
	for _, p := range st.temps {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("journal: remove temporary file: %w", err)
		}
		changed = true
	}
	for _, p := range st.oldSnaps {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("journal: remove old snapshot: %w", err)
		}
		changed = true
	}
	for _, s := range st.segs[:st.covered] {
		if err := os.Remove(s.path); err != nil {
			return fmt.Errorf("journal: remove compacted segment: %w", err)
		}
		changed = true
	}
	if changed {
		return syncDir(dir)
	}
	return nil
}

// OpenReadOnly opens the file journal in dir for reading: [Journal.Replay]
// works, Append and Snapshot return [ErrReadOnly]. It changes nothing in
// dir, so it works on a read-only path: a torn tail is left in place (and
// not replayed) and reported by [FileJournal.Recovery], and nothing is
// created. It takes a shared lock on dir, so it fails with [ErrLocked]
// while a writer has the journal open; readers do not exclude each other.
// Damage is reported as by [Open].
func OpenReadOnly(dir string) (*FileJournal, error) {
	lock, err := lockDir(dir, false)
	if err != nil {
		return nil, err
	}
	st, dmg, err := load(dir)
	if err == nil && dmg != nil {
		err = dmg.err
	}
	var mark *RepairMark
	if err == nil {
		mark, err = readRepairMark(dir)
	}
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	j := &FileJournal{
		dir:      dir,
		cfg:      DefaultConfig(),
		lock:     lock,
		done:     make(chan struct{}),
		segs:     st.segs[st.covered:],
		snap:     st.snap,
		last:     st.last(),
		rec:      Recovery{Repaired: mark},
		readOnly: true,
	}
	if st.torn {
		seg := st.segs[len(st.segs)-1]
		j.rec.Torn = &TornTail{File: seg.path, Offset: seg.size, Bytes: seg.fileSize - seg.size, Reason: st.tornWhy}
	}
	close(j.done)
	return j, nil
}

// Recovery returns what Open found and did to the directory: the torn
// tail it truncated, and the mark a [Repair] left. It does not change.
func (j *FileJournal) Recovery() Recovery { return j.rec }

// Append implements [Journal.Append]. Concurrent calls share one write and
// one fsync: the writer goroutine takes every call waiting when it starts
// a batch.
func (j *FileJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if j.readOnly {
		return 0, ErrReadOnly
	}
	if len(recs) == 0 {
		j.gate.RLock()
		closed := j.closed
		j.gate.RUnlock()
		if closed {
			return 0, ErrClosed
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.last, j.failed
	}
	size := 0
	for i, r := range recs {
		if len(r) > j.cfg.MaxRecordSize {
			return 0, fmt.Errorf("%w: record %d of the call is %d bytes, the maximum (Config.MaxRecordSize) is %d",
				ErrTooLarge, i, len(r), j.cfg.MaxRecordSize)
		}
		size += int(frameSize(len(r)))
	}
	// Encode here, in the caller's goroutine, so that the writer only
	// fills in indexes and Append never retains recs. The batch header's
	// room comes first, for a batch of this call alone.
	buf := make([]byte, batchHeaderSize, batchHeaderSize+size)
	frames := buf[batchHeaderSize:]
	for _, r := range recs {
		off := len(frames)
		frames = appendFrame(frames, 0, r)
		binary.LittleEndian.PutUint32(frames[off+wordSize:], crc32.Checksum(r, crcTable))
	}
	req := &appendReq{frames: frames, whole: buf[:batchHeaderSize+len(frames)], done: make(chan struct{})}

	j.gate.RLock()
	if j.closed {
		j.gate.RUnlock()
		return 0, ErrClosed
	}
	select {
	case j.reqs <- req:
		j.gate.RUnlock()
	case <-ctx.Done():
		j.gate.RUnlock()
		return 0, ctx.Err()
	}
	select {
	case <-req.done:
		return req.last, req.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// writer is the goroutine that writes and syncs batches of appends.
func (j *FileJournal) writer() {
	defer close(j.done)
	var batch []*appendReq
	for {
		req, ok := <-j.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], req)
		bytes := len(req.frames)
	gather:
		for bytes < maxBatchBytes {
			select {
			case r, ok := <-j.reqs:
				if !ok {
					break gather // the channel is closed: commit, then the next receive returns
				}
				batch = append(batch, r)
				bytes += len(r.frames)
			default:
				break gather
			}
		}
		j.commit(batch)
		clear(batch)
		// Let the appenders just answered run and queue their next
		// append before the next batch starts: on a machine with few
		// cores this nearly doubles the appends per fsync.
		runtime.Gosched()
	}
}

// commit writes one batch, syncs it and answers its appenders.
func (j *FileJournal) commit(batch []*appendReq) {
	j.mu.Lock()
	failed, next := j.failed, j.last+1
	j.mu.Unlock()
	if failed == nil && j.activeSize >= j.cfg.SegmentSize {
		if err := j.roll(next); err != nil {
			failed = j.fail(err)
		}
	}
	if failed != nil {
		for _, r := range batch {
			r.err = failed
			close(r.done)
		}
		return
	}
	var out []byte
	if len(batch) == 1 {
		out = batch[0].whole
	} else {
		out = append(j.buf[:0], make([]byte, batchHeaderSize)...)
	}
	index := next
	for _, r := range batch {
		for off := 0; off < len(r.frames); {
			word := binary.LittleEndian.Uint64(r.frames[off:])
			bodyLen := int64(word & lenMask)
			body := r.frames[off+wordSize:]
			binary.LittleEndian.PutUint32(body, frameCRC(binary.LittleEndian.Uint32(body), index))
			binary.LittleEndian.PutUint64(body[4:], index)
			index++
			off += int(wordSize + bodyLen + padding(bodyLen))
		}
		r.last = index - 1
		if len(batch) > 1 {
			out = append(out, r.frames...)
		}
	}
	if len(batch) > 1 && cap(out) <= maxBatchBytes*2 {
		j.buf = out
	}
	payload := out[batchHeaderSize:]
	putBatchHeader(out, batchHeader{
		payloadLen:  int64(len(payload)),
		first:       next,
		count:       uint32(index - next),
		payloadCRC:  crc32.Checksum(payload, crcTable),
		unixNano:    j.now().UnixNano(),
		zeroSectors: zeroSectorsAt(payload, j.activeSize+batchHeaderSize),
	})
	err := writeAll(j.active, out)
	if err == nil {
		err = fdatasync(j.active)
		j.fsyncs.Add(1)
	}
	if err == nil {
		err = j.cfg.step("batch-synced")
	}
	if err != nil {
		err = j.fail(fmt.Errorf("journal: append to %s: %w", j.active.Name(), err))
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
		return
	}
	j.activeSize += int64(len(out))
	j.mu.Lock()
	j.last = index - 1
	j.segs[len(j.segs)-1].size = j.activeSize
	j.segs[len(j.segs)-1].last = index - 1
	j.mu.Unlock()
	for _, r := range batch {
		close(r.done)
	}
}

// now returns the time written into batch headers.
func (j *FileJournal) now() time.Time {
	if j.cfg.now != nil {
		return j.cfg.now()
	}
	return time.Now()
}

// fail records the first write failure and returns the error that appends
// get from now on.
func (j *FileJournal) fail(err error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed == nil {
		j.failed = fmt.Errorf("%w: %w (close and reopen the journal)", ErrFailed, err)
	}
	return j.failed
}

func writeAll(f *os.File, b []byte) error {
	_, err := f.Write(b) // os.File.Write loops until all is written or an error
	return err
}

// roll starts a new segment whose first record will be next.
func (j *FileJournal) roll(next uint64) error {
	j.mu.Lock()
	cur := j.segs[len(j.segs)-1]
	j.mu.Unlock()
	seg, err := createSegment(j.dir, fileName{kind: kindSegment, seq: cur.name.seq + 1, index: next})
	if err != nil {
		return err
	}
	if err := j.cfg.step("segment-created"); err != nil {
		return err
	}
	f, err := os.OpenFile(seg.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("journal: open segment: %w", err)
	}
	if err := j.active.Close(); err != nil {
		f.Close()
		return fmt.Errorf("journal: close segment %s: %w", j.active.Name(), err)
	}
	j.active, j.activeSize = f, seg.size
	j.mu.Lock()
	j.segs = append(j.segs, seg)
	j.mu.Unlock()
	return nil
}

// Replay implements [Journal.Replay]. It reads the files; records
// appended after it starts are not yielded.
func (j *FileJournal) Replay(ctx context.Context, fn func(Entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j.gate.RLock()
	closed := j.closed
	j.gate.RUnlock()
	if closed {
		return ErrClosed
	}
	// Open every file while holding mu: compaction removes a file from
	// the list under mu before deleting it, so every file listed here
	// exists, and an open file stays readable after it is deleted.
	type openSeg struct {
		segment
		f *os.File
	}
	var (
		snapF *os.File
		snap  *snapshotFile
		segs  []openSeg
		last  uint64
	)
	defer func() {
		if snapF != nil {
			snapF.Close()
		}
		for _, s := range segs {
			s.f.Close()
		}
	}()
	err := func() error {
		j.mu.Lock()
		defer j.mu.Unlock()
		snap, last = j.snap, j.last
		if snap != nil {
			f, err := os.Open(snap.path)
			if err != nil {
				return fmt.Errorf("journal: open snapshot: %w", err)
			}
			snapF = f
		}
		for _, s := range j.segs {
			f, err := os.Open(s.path)
			if err != nil {
				return fmt.Errorf("journal: open segment: %w", err)
			}
			segs = append(segs, openSeg{s, f})
		}
		return nil
	}()
	if err != nil {
		return err
	}

	after := uint64(0)
	if snap != nil {
		fi, err := snapF.Stat()
		if err != nil {
			return fmt.Errorf("journal: stat snapshot: %w", err)
		}
		fr := &frameReader{r: bufio.NewReaderSize(snapF, 64<<10), off: int64(len(snapshotMagic)), size: fi.Size()}
		if _, err := snapF.Seek(fr.off, io.SeekStart); err != nil {
			return fmt.Errorf("journal: read snapshot %s: %w", snap.path, err)
		}
		index, data, err := fr.next()
		if err != nil {
			return readError(snap.path, fr.off, err)
		}
		if index != snap.index {
			return &CorruptError{File: snap.path, Offset: int64(len(snapshotMagic)), Reason: fmt.Sprintf("snapshot frame has index %d, its name says %d", index, snap.index)}
		}
		if err := fn(Entry{Index: index, Snapshot: true, Data: data}); err != nil {
			return err
		}
		after = snap.index
	}
	want := uint64(0)
	for _, s := range segs {
		rr, err := newRecordReader(s.f, s.size, s.v1)
		if err != nil {
			return err
		}
		if want == 0 {
			want = s.name.index
		}
		for {
			off := rr.offset()
			index, data, err := rr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return readError(s.path, off, err)
			}
			if index != want {
				return &CorruptError{File: s.path, Offset: off, Reason: fmt.Sprintf("record index %d, want %d", index, want)}
			}
			want++
			if index <= after {
				continue
			}
			if index > last {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(Entry{Index: index, Data: data}); err != nil {
				return err
			}
		}
	}
	return nil
}

// readError turns a frame reader's error into a *CorruptError or an I/O
// error naming the file.
func readError(path string, off int64, err error) error {
	var fe *frameError
	if errors.As(err, &fe) {
		return &CorruptError{File: path, Offset: off, Reason: fe.msg}
	}
	if err == io.EOF {
		return &CorruptError{File: path, Offset: off, Reason: "no frame"}
	}
	return fmt.Errorf("journal: read %s at offset %d: %w", path, off, err)
}

// Snapshot implements [Journal.Snapshot]. The snapshot is written to a
// temporary file, synced, renamed and the directory synced; only then are
// the older snapshot and the segments it wholly covers removed, oldest
// first. Snapshots are serialised; appends go on meanwhile.
func (j *FileJournal) Snapshot(ctx context.Context, index uint64, state []byte) error {
	j.gate.RLock()
	defer j.gate.RUnlock()
	if j.closed {
		return ErrClosed
	}
	if j.readOnly {
		return ErrReadOnly
	}
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	j.mu.Lock()
	failed, last, cur := j.failed, j.last, j.snap
	j.mu.Unlock()
	if failed != nil {
		return failed
	}
	lo := uint64(0)
	if cur != nil {
		lo = cur.index
	}
	if index < lo || index > last {
		return fmt.Errorf("%w: index %d, want %d to %d", ErrSnapshotIndex, index, lo, last)
	}

	name := fileName{kind: kindSnapshot, index: index}
	path := filepath.Join(j.dir, name.String())
	content := appendFrame(append(make([]byte, 0, len(snapshotMagic)+int(frameSize(len(state)))), snapshotMagic[:]...), index, state)
	if err := writeTemp(path+tempExt, content); err != nil {
		return err
	}
	if err := j.cfg.step("snapshot-synced"); err != nil {
		return err
	}
	if err := os.Rename(path+tempExt, path); err != nil {
		os.Remove(path + tempExt)
		return fmt.Errorf("journal: rename snapshot: %w", err)
	}
	if err := j.cfg.step("snapshot-renamed"); err != nil {
		return err
	}
	if err := syncDir(j.dir); err != nil {
		return err
	}
	if err := j.cfg.step("snapshot-dir-synced"); err != nil {
		return err
	}

	// The snapshot is durable: compact.
	snap := &snapshotFile{path: path, index: index}
	j.mu.Lock()
	old := j.snap
	j.snap = snap
	n := 0
	for n < len(j.segs)-1 && j.segs[n+1].name.index-1 <= index {
		n++
	}
	covered := append([]segment(nil), j.segs[:n]...)
	j.segs = append([]segment(nil), j.segs[n:]...)
	j.mu.Unlock()

	if old != nil && old.path != path {
		if err := os.Remove(old.path); err != nil {
			return fmt.Errorf("journal: remove old snapshot: %w", err)
		}
		if err := j.cfg.step("old-snapshot-removed"); err != nil {
			return err
		}
	}
	for _, s := range covered {
		if err := os.Remove(s.path); err != nil {
			return fmt.Errorf("journal: remove compacted segment: %w", err)
		}
		if err := j.cfg.step("segment-removed"); err != nil {
			return err
		}
	}
	if old != nil || len(covered) > 0 {
		if err := syncDir(j.dir); err != nil {
			return err
		}
		if err := j.cfg.step("compaction-dir-synced"); err != nil {
			return err
		}
	}
	if j.marked && index > j.markLast {
		// The caller saved a state built on the repaired journal.
		if err := removeRepairMark(j.dir); err != nil {
			return err
		}
		j.marked = false
	}
	return nil
}

// Close implements [Journal.Close]. Appends already handed to the writer
// are written and synced before Close returns.
func (j *FileJournal) Close() error {
	j.gate.Lock()
	if j.closed {
		j.gate.Unlock()
		return ErrClosed
	}
	j.closed = true
	if !j.readOnly {
		close(j.reqs)
	}
	j.gate.Unlock()
	<-j.done
	var err error
	if j.active != nil {
		if err = j.active.Close(); err != nil {
			err = fmt.Errorf("journal: close segment: %w", err)
		}
	}
	return errors.Join(err, unlockDir(j.lock))
}

// makeDir creates dir (mode 0700) and any missing parent, and syncs the
// parent of every directory it created, so that each is durable. It
// returns the topmost directory it created ("" when dir existed), for a
// failed Open to remove.
func makeDir(dir string) (created string, err error) {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return "", fmt.Errorf("journal: %s is not a directory", dir)
		}
		return "", nil
	}
	var missing []string // dir first, then its missing parents
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("journal: create directory %s: %w", dir, err)
	}
	if len(missing) == 0 {
		// Made meanwhile by another Open: not ours to remove.
		return "", nil
	}
	created = missing[len(missing)-1]
	for _, d := range missing {
		if err := syncDir(filepath.Dir(d)); err != nil {
			removeEmpty(dir, created)
			return "", err
		}
	}
	return created, nil
}

// removeEmpty removes dir and its parents up to created, innermost first,
// while they are empty: what another Open put there meanwhile stays.
func removeEmpty(dir, created string) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if os.Remove(d) != nil || d == created || filepath.Dir(d) == d {
			return
		}
	}
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	return syncPath(path, "")
}

// syncPath fsyncs the file or directory at path; what names it in errors.
func syncPath(path, what string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("journal: open %s%s: %w", what, path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: sync %s%s: %w", what, path, err)
	}
	return nil
}

// createSegment creates an empty segment file durably.
func createSegment(dir string, name fileName) (segment, error) {
	path := filepath.Join(dir, name.String())
	if err := writeTemp(path+tempExt, segmentMagic[:]); err != nil {
		return segment{}, err
	}
	if err := os.Rename(path+tempExt, path); err != nil {
		os.Remove(path + tempExt)
		return segment{}, fmt.Errorf("journal: rename segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return segment{}, err
	}
	n := int64(len(segmentMagic))
	return segment{name: name, path: path, size: n, fileSize: n, last: name.index - 1}, nil
}

// writeTemp writes b to a new file at path (mode 0600) and syncs it.
func writeTemp(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: create %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("journal: write %s: %w", path, err)
	}
	return nil
}

// truncateFile truncates the file at path to size and syncs it.
func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("journal: open %s: %w", path, err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: truncate %s at %d: %w", path, size, err)
	}
	return nil
}

// syncDir fsyncs a directory, making renames and removals in it durable.
func syncDir(dir string) error {
	if dirSynced != nil {
		dirSynced(dir)
	}
	return syncPath(dir, "directory ")
}

// dirSynced, when set (by tests), is told of every syncDir.
var dirSynced func(dir string)
