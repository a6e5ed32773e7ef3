package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Recovery is what [Open] found in a journal directory and did about it.
type Recovery struct {
	// Torn is the torn tail that Open truncated: the last write of a
	// crash, never acknowledged. Nil when there was none.
	Torn *TornTail
	// Repaired is the mark that a [Repair] which removed records left,
	// until the caller has acted on the repaired journal (see
	// [RepairMark]). Nil when there is none.
	Repaired *RepairMark
}

// TornTail is a torn last write that [Open] truncated.
type TornTail struct {
	// File is the segment's path.
	File string
	// Offset is where it was truncated.
	Offset int64
	// Bytes is how many bytes were cut.
	Bytes int64
	// Reason says what was incomplete.
	Reason string
}

// String returns "FILE truncated at offset N (B bytes): REASON".
func (t *TornTail) String() string {
	return fmt.Sprintf("%s truncated at offset %d (%d bytes): %s", t.File, t.Offset, t.Bytes, t.Reason)
}

// RepairMark records that [Repair] removed records from a journal: the
// decisions they held are lost, and a caller that would now make a
// decision afresh (tidemark's Loader resolving LATEST) must not pretend
// that nothing happened in between. Repair writes it durably to the
// directory; [Open] reports it in [Recovery.Repaired]; the journal removes
// it once a [Journal.Snapshot] past LastIndex is durable, that is once the
// caller has saved a state built on the repaired journal.
type RepairMark struct {
	// Time is when Repair ran (the host's clock).
	Time time.Time `json:"time"`
	// LastIndex is the index of the last record that survived; records
	// after it were removed (and kept in Repair's backups).
	LastIndex uint64 `json:"last_index"`
	// LastWrite is when the last surviving batch was written, by the
	// writer's clock: every removed record was written at or after it
	// (give or take that clock's steps). Zero when unknown: no batch
	// survived, or only first-format segments did.
	LastWrite time.Time `json:"last_write"`
}

const repairMarkName = "REPAIRED"

// readRepairMark reads dir's repair mark; nil when there is none.
func readRepairMark(dir string) (*RepairMark, error) {
	path := filepath.Join(dir, repairMarkName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: read repair mark: %w", err)
	}
	var m RepairMark
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, &CorruptError{File: path, Offset: 0, Reason: "repair mark cannot be decoded: " + err.Error()}
	}
	return &m, nil
}

// writeRepairMark writes m durably as dir's repair mark, merged with the
// mark already there: the earliest LastIndex and LastWrite win (an unknown
// time stays unknown), so a second repair never hides the first one's loss.
func writeRepairMark(dir string, m RepairMark) (RepairMark, error) {
	old, err := readRepairMark(dir)
	if err != nil {
		return m, err
	}
	if old != nil {
		m.LastIndex = min(m.LastIndex, old.LastIndex)
		switch {
		case old.LastWrite.IsZero() || m.LastWrite.IsZero():
			m.LastWrite = time.Time{} // either loss has no known time
		case old.LastWrite.Before(m.LastWrite):
			m.LastWrite = old.LastWrite
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return m, fmt.Errorf("journal: encode repair mark: %w", err)
	}
	path := filepath.Join(dir, repairMarkName)
	if err := writeTemp(path+tempExt, b); err != nil {
		return m, err
	}
	if err := os.Rename(path+tempExt, path); err != nil {
		os.Remove(path + tempExt)
		return m, fmt.Errorf("journal: rename repair mark: %w", err)
	}
	return m, syncDir(dir)
}

// removeRepairMark removes dir's repair mark durably.
func removeRepairMark(dir string) error {
	err := os.Remove(filepath.Join(dir, repairMarkName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: remove repair mark: %w", err)
	}
	return syncDir(dir)
}
