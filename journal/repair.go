package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RepairReport is what [Repair] did: one Cut per file it cut or moved
// aside, in the order it did them, and the mark it left. A journal that
// needed no repair gets a report with no Cuts and no Mark.
type RepairReport struct {
	Cuts []Cut
	// Mark is the [RepairMark] Repair left because it removed records;
	// nil when it removed none (only a damaged snapshot whose records the
	// segments still hold, or nothing at all).
	Mark *RepairMark
}

// Cut is one file that [Repair] cut.
type Cut struct {
	// Reason is the damage that made Repair cut. Every file removed
	// because of one damage shares its Reason.
	Reason *CorruptError
	// File is the path of the file cut.
	File string
	// Offset is where File was truncated; -1 when the whole file was
	// moved aside (to Backup) and File no longer exists.
	Offset int64
	// Bytes is how many bytes were cut from File (all of them when
	// Offset is -1).
	Bytes int64
	// Backup is the path of the copy of File as it was before this cut.
	// Repair never overwrites a file: each Cut has a Backup of its own.
	Backup string
}

// Repair cuts a damaged journal in dir back to its last good record, so
// that [Open] accepts it again. Call it on purpose, after Open returned a
// [*CorruptError]: it discards data. For each damage it finds (see
// [CorruptError]) it keeps a copy of the damaged file, named
// FILE.corrupt-TIMESTAMP (with -2, -3, ... appended when that name is
// taken: no backup is ever overwritten), then truncates the segment at the
// last good record before the damage and moves every later segment aside
// (keeping it the same way). Every byte it removes is in a backup that the
// report lists. A damaged latest snapshot is moved aside when the older
// snapshot or the segments still hold everything it covered; otherwise
// Repair changes nothing and returns an error wrapping ErrCorrupt. A torn
// tail is not damage: Repair leaves it, and Open truncates it.
//
// When it removed records, Repair leaves a [RepairMark] in the directory
// (see [Recovery.Repaired]): the decisions those records held are gone,
// and the journal's user must not decide afresh as if nothing had been
// decided (tidemark's Loader resumes such shards from the time of the
// last surviving write instead of resolving LATEST again). Running Repair
// again on a repaired journal changes nothing.
//
// Repair locks dir like Open (an open directory returns [ErrLocked]). It
// returns what it cut even when it stops with an error.
func Repair(dir string) (RepairReport, error) {
	var rep RepairReport
	if _, err := os.Stat(dir); err != nil {
		return rep, fmt.Errorf("journal: repair: %w", err)
	}
	lock, err := lockDir(dir, true)
	if err != nil {
		return rep, err
	}
	defer unlockDir(lock)
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	removed := false
	for {
		st, dmg, err := load(dir)
		if err != nil {
			return rep, err
		}
		if dmg == nil {
			if removed {
				m, err := writeRepairMark(dir, markOf(st))
				if err != nil {
					return rep, err
				}
				rep.Mark = &m
			}
			return rep, nil
		}
		before := len(rep.Cuts)
		if dmg.snapshot {
			if err := repairSnapshot(dir, dmg, stamp, &rep); err != nil {
				return rep, err
			}
			continue
		}
		// The mark goes first: a Repair stopped after a cut and before
		// its mark would leave records removed and no mark, and a second
		// Repair finds nothing to do.
		if _, err := writeRepairMark(dir, markBefore(st, dmg)); err != nil {
			return rep, err
		}
		if err := cutSegments(st, dmg, stamp, &rep); err != nil {
			return rep, err
		}
		if len(rep.Cuts) == before {
			return rep, fmt.Errorf("journal: repair: cannot repair %w", dmg.err)
		}
		removed = true
		if err := syncDir(dir); err != nil {
			return rep, err
		}
	}
}

// markOf returns the repair mark of a repaired directory: its last record
// and the write time of its last whole batch.
func markOf(st *dirState) RepairMark {
	m := RepairMark{Time: time.Now().UTC(), LastIndex: st.last()}
	for _, s := range st.segs[st.covered:] {
		if s.lastWrite != 0 {
			m.LastWrite = time.Unix(0, s.lastWrite).UTC()
		}
	}
	return m
}

// markBefore returns the repair mark of st as it will be once dmg is cut:
// the last record and batch write time of the whole batches before the
// damage. Records of the damaged batch that the cut keeps are left out, so
// the mark errs towards an earlier index and time.
func markBefore(st *dirState, dmg *damage) RepairMark {
	m := RepairMark{Time: time.Now().UTC()}
	if st.snap != nil {
		m.LastIndex = st.snap.index
	}
	end := dmg.seg
	if dmg.cut >= int64(len(segmentMagic)) {
		end++
	}
	for _, s := range st.segs[st.covered:max(end, st.covered)] {
		m.LastIndex = max(m.LastIndex, s.last)
		if s.lastWrite != 0 {
			m.LastWrite = time.Unix(0, s.lastWrite).UTC()
		}
	}
	return m
}

// repairSnapshot moves a damaged snapshot aside if the journal is whole
// without it, and puts it back otherwise.
func repairSnapshot(dir string, dmg *damage, stamp string, rep *RepairReport) error {
	path := dmg.err.File
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("journal: repair: %w", err)
	}
	backup, err := moveAside(path, stamp)
	if err != nil {
		return err
	}
	_, next, err := load(dir)
	if err == nil && next != nil && next.missingHead {
		if rerr := os.Rename(backup, path); rerr != nil {
			return fmt.Errorf("journal: repair: put %s back: %w", path, rerr)
		}
		return fmt.Errorf("journal: repair: cannot repair %w: the records it covers were compacted away", dmg.err)
	}
	if err != nil {
		return err
	}
	rep.Cuts = append(rep.Cuts, Cut{Reason: dmg.err, File: path, Offset: -1, Bytes: fi.Size(), Backup: backup})
	return syncDir(dir)
}

// cutSegments truncates st.segs[dmg.seg] at dmg.cut (or moves it aside when
// the cut is inside its header) and moves every later segment aside.
func cutSegments(st *dirState, dmg *damage, stamp string, rep *RepairReport) error {
	for i := dmg.seg; i < len(st.segs); i++ {
		s := st.segs[i]
		fi, err := os.Stat(s.path)
		if err != nil {
			return fmt.Errorf("journal: repair: %w", err)
		}
		if i == dmg.seg && dmg.cut >= int64(len(segmentMagic)) {
			if dmg.cut >= fi.Size() {
				continue // nothing to cut from this one; the damage is after it
			}
			backup, err := copyAside(s.path, stamp)
			if err != nil {
				return err
			}
			cut, err := cutBatch(s.path, dmg)
			if err != nil {
				return err
			}
			rep.Cuts = append(rep.Cuts, Cut{Reason: dmg.err, File: s.path, Offset: cut, Bytes: fi.Size() - cut, Backup: backup})
			continue
		}
		backup, err := moveAside(s.path, stamp)
		if err != nil {
			return err
		}
		rep.Cuts = append(rep.Cuts, Cut{Reason: dmg.err, File: s.path, Offset: -1, Bytes: fi.Size(), Backup: backup})
	}
	return nil
}

// cutBatch truncates the segment at path at dmg.cut and returns where it
// cut. When the cut falls
// inside a batch after some of its records, the batch's header is
// rewritten to hold just those records (same first index and write time),
// so that they stay a whole batch; when it falls on the batch's first
// record, the batch goes whole.
func cutBatch(path string, dmg *damage) (int64, error) {
	cut := dmg.cut
	var hdr []byte
	if dmg.batchAt >= 0 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("journal: repair: %w", err)
		}
		h, err := parseBatchHeader(b[dmg.batchAt:])
		if err != nil {
			return 0, fmt.Errorf("journal: repair: batch header of %s at %d: %w", path, dmg.batchAt, err)
		}
		payload := b[dmg.batchAt+batchHeaderSize : cut]
		if len(payload) == 0 {
			cut = dmg.batchAt
		} else {
			h.count = 0
			for off := 0; off < len(payload); h.count++ {
				_, _, n, ferr := decodeFrame(payload[off:])
				if ferr != nil {
					return 0, fmt.Errorf("journal: repair: %s at %d: %s", path, dmg.batchAt+batchHeaderSize+int64(off), ferr.msg)
				}
				off += n
			}
			h.payloadLen = int64(len(payload))
			h.payloadCRC = crc32.Checksum(payload, crcTable)
			hdr = make([]byte, batchHeaderSize)
			putBatchHeader(hdr, h)
		}
	}
	if err := truncateFile(path, cut); err != nil {
		return 0, err
	}
	if hdr == nil {
		return cut, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("journal: repair: %w", err)
	}
	_, err = f.WriteAt(hdr, dmg.batchAt)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("journal: repair: rewrite the batch header of %s at %d: %w", path, dmg.batchAt, err)
	}
	return cut, nil
}

// backupName returns the n-th candidate backup name of path:
// FILE.corrupt-STAMP, then FILE.corrupt-STAMP-2, -3, ...
func backupName(path, stamp string, n int) string {
	name := path + ".corrupt-" + stamp
	if n > 1 {
		name += "-" + strconv.Itoa(n)
	}
	return name
}

// linkNew hard-links src to the first free backup name of path and returns
// it. link(2) never replaces an existing file, so no backup is overwritten.
func linkNew(src, path, stamp string) (string, error) {
	for n := 1; ; n++ {
		dst := backupName(path, stamp, n)
		err := os.Link(src, dst)
		if err == nil {
			return dst, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("journal: repair: keep a backup of %s: %w", path, err)
		}
	}
}

// moveAside moves path to a new backup name.
func moveAside(path, stamp string) (string, error) {
	backup, err := linkNew(path, path, stamp)
	if err != nil {
		return "", err
	}
	if err := os.Remove(path); err != nil {
		return "", fmt.Errorf("journal: repair: move %s aside: %w", path, err)
	}
	return backup, syncDir(filepath.Dir(path))
}

// copyAside copies path durably to a new backup name.
func copyAside(path, stamp string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("journal: repair: %w", err)
	}
	defer in.Close()
	tmp := path + ".corrupt" + tempExt
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("journal: repair: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("journal: repair: copy %s: %w", path, err)
	}
	backup, err := linkNew(tmp, path, stamp)
	os.Remove(tmp)
	if err != nil {
		return "", err
	}
	return backup, syncDir(filepath.Dir(path))
}
