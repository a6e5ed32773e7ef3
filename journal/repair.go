package journal

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// RepairReport is what [Repair] did: one Cut per file it cut or moved
// aside, in the order it did them. A journal that needed no repair gets a
// report with no Cuts.
type RepairReport struct {
	Cuts []Cut
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
	// Backup is the path of the copy of File as it was before the cut.
	Backup string
}

// Repair cuts a damaged journal in dir back to its last good record, so
// that [Open] accepts it again. Call it on purpose, after Open returned a
// [*CorruptError]: it discards data. For each damage it finds (see
// [CorruptError]) it keeps a copy of the damaged file, named
// FILE.corrupt-TIMESTAMP, then truncates the segment at the last good
// record before the damage and moves every later segment aside (keeping
// it the same way). A damaged latest snapshot is moved aside when the
// older snapshot or the segments still hold everything it covered;
// otherwise Repair changes nothing and returns an error wrapping
// ErrCorrupt. A torn tail is not damage: Repair leaves it, and Open
// truncates it.
//
// Repair locks dir like Open (an open directory returns [ErrLocked]). It
// returns what it cut even when it stops with an error.
func Repair(dir string) (RepairReport, error) {
	var rep RepairReport
	if _, err := os.Stat(dir); err != nil {
		return rep, fmt.Errorf("journal: repair: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return rep, err
	}
	defer unlockDir(lock)
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	for {
		st, dmg, err := load(dir, DefaultMaxRecordSize)
		if err != nil {
			return rep, err
		}
		if dmg == nil {
			return rep, nil
		}
		before := len(rep.Cuts)
		if dmg.snapshot {
			if err := repairSnapshot(dir, dmg, stamp, &rep); err != nil {
				return rep, err
			}
			continue
		}
		if err := cutSegments(st, dmg, stamp, &rep); err != nil {
			return rep, err
		}
		if len(rep.Cuts) == before {
			return rep, fmt.Errorf("journal: repair: cannot repair %w", dmg.err)
		}
		if err := syncDir(dir); err != nil {
			return rep, err
		}
	}
}

// repairSnapshot moves a damaged snapshot aside if the journal is whole
// without it, and puts it back otherwise.
func repairSnapshot(dir string, dmg *damage, stamp string, rep *RepairReport) error {
	path := dmg.err.File
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("journal: repair: %w", err)
	}
	backup := path + ".corrupt-" + stamp
	if err := os.Rename(path, backup); err != nil {
		return fmt.Errorf("journal: repair: move %s aside: %w", path, err)
	}
	_, next, err := load(dir, DefaultMaxRecordSize)
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
		backup := s.path + ".corrupt-" + stamp
		if i == dmg.seg && dmg.cut >= int64(len(segmentMagic)) {
			if dmg.cut >= fi.Size() {
				continue // nothing to cut from this one; the damage is after it
			}
			if err := copyFile(s.path, backup); err != nil {
				return err
			}
			if err := truncateFile(s.path, dmg.cut); err != nil {
				return err
			}
			rep.Cuts = append(rep.Cuts, Cut{Reason: dmg.err, File: s.path, Offset: dmg.cut, Bytes: fi.Size() - dmg.cut, Backup: backup})
			continue
		}
		if err := os.Rename(s.path, backup); err != nil {
			return fmt.Errorf("journal: repair: move %s aside: %w", s.path, err)
		}
		rep.Cuts = append(rep.Cuts, Cut{Reason: dmg.err, File: s.path, Offset: -1, Bytes: fi.Size(), Backup: backup})
	}
	return nil
}

// copyFile copies src to a new file dst durably (temp + sync + rename).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("journal: repair: %w", err)
	}
	defer in.Close()
	tmp := dst + tempExt
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: repair: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: repair: copy %s to %s: %w", src, dst, err)
	}
	return syncDir(filepath.Dir(dst))
}
