package kinesisload

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// RepairRewind is how far before the last surviving write of a repaired
// journal a Loader resumes the shards whose LATEST would otherwise be
// resolved afresh (see [journal.RepairMark]): a margin for the writer's
// clock against Kinesis's arrival times. It costs duplicates, never loss.
const RepairRewind = 5 * time.Minute

// RepairedJournalError stops Run when [journal.Repair] removed records
// from the journal, shards would start at a freshly resolved LATEST
// (their resolved start was among what was removed), and the journal
// kept no write time to resume them from. Resolving LATEST again would
// silently skip every record that arrived since the lost decision.
//
// Run returns it as the Err of a [*RunError] of class [ErrJournal].
//
// The way out: set each named shard's start explicitly in Config.Shards,
// to TRIM_HORIZON or to AT_TIMESTAMP of a time before the damage (the
// repair report's backups show what was cut), then Run again.
type RepairedJournalError struct {
	// Stream is the stream name.
	Stream string
	// Shards are the shards that would start at a fresh LATEST.
	Shards []string
	// Mark is the repair's mark.
	Mark journal.RepairMark
}

// Error names the stream, the shards and the way out.
func (e *RepairedJournalError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: the journal was repaired at %s and lost the records after index %d, "+
		"with no surviving write time; shards %s would start at a newly resolved LATEST and skip what arrived since "+
		"the lost decision: set their start in Config.Shards (TRIM_HORIZON, or AT_TIMESTAMP before the damage) and run again",
		e.Stream, e.Mark.Time.Format(time.RFC3339), e.Mark.LastIndex, strings.Join(e.Shards, ", "))
}

// Unwrap returns [ErrJournalRepaired].
func (e *RepairedJournalError) Unwrap() error { return ErrJournalRepaired }

// repairMarker is a PositionStore whose journal may carry a repair mark.
type repairMarker interface {
	repairMark() *journal.RepairMark
}

// repairMark returns the mark of the journal under a JournalStore, nil
// when there is none or the journal is not a file journal.
func (s *JournalStore) repairMark() *journal.RepairMark {
	r, ok := s.j.(interface{ Recovery() journal.Recovery })
	if !ok {
		return nil
	}
	return r.Recovery().Repaired
}

// rewindAfterRepair returns the starts of pending shards (whose LATEST is
// to be resolved) after a repair that lost decisions: AT_TIMESTAMP of the
// last surviving write minus RepairRewind, so that nothing that arrived
// since the lost decision is skipped. Without a surviving write time it
// returns a *RepairedJournalError.
func rewindAfterRepair(stream string, pending []string, mark *journal.RepairMark) ([]scan.ShardResult, error) {
	if mark.LastWrite.IsZero() {
		return nil, &RepairedJournalError{Stream: stream, Shards: pending, Mark: *mark}
	}
	start := scan.AtTimestamp(mark.LastWrite.Add(-RepairRewind))
	out := make([]scan.ShardResult, len(pending))
	for i, id := range pending {
		out[i] = scan.ShardResult{Shard: id, Position: start}
	}
	return out, nil
}
