// Package journal is tidemark's durable write-ahead record of decisions:
// records are appended durably, replayed in order after the latest
// snapshot, and compacted away once a snapshot covers them.
//
// The [Journal] interface is small and every method states its contract.
// [NewMemory] returns an in-memory Journal for tests; [Open] returns the file
// journal, the embedded default, which keeps everything in one directory.
// The package knows nothing about Kinesis: records and snapshot states are
// opaque bytes.
//
// # Replay
//
// Every record gets an index when it is appended: 1 for the first record of
// a new journal, then one more for each record, with no gaps. A snapshot is
// the caller's state after applying every record up to and including some
// index. [Journal.Replay] yields, in this order:
//
//  1. the latest snapshot, if there is one, as an [Entry] with Snapshot set
//     and Index the last record index it covers;
//  2. every record with a larger index, in index order, each as an [Entry]
//     with Snapshot unset.
//
// A caller rebuilds its state by starting from the snapshot's state (or
// from nothing when the first Entry is not a snapshot) and applying the
// records one by one.
//
// # The file journal
//
// The directory holds segment files (<seq>-<first index>.seg, both 16 hex
// digits) and snapshot files (<index>.snap). A segment starts with an
// 8-byte magic whose last byte is the format version, then holds batches:
// each write of the writer goroutine (one group commit: the records of
// every Append waiting when it started) is one batch, a 40-byte header
// (payload length, first index, record count, CRC-32C of the payload, the
// write time, the number of all-zero 512-byte sectors in the payload, and
// a CRC-32C of the header) followed by the records' frames. A frame is
// 8-byte aligned: a little-endian uint64 length word whose low 56 bits are
// the body length and whose top byte is 0x80|padding, then the body (a
// CRC-32C of the data extended with the index, the record index and the
// data), then 0 to 7 zero bytes of padding. A snapshot holds its magic and
// one frame.
//
// Appends are written, then fdatasync'ed, before Append returns;
// concurrent appenders share one write and one fsync. New files are
// written to a temporary name, synced, renamed and then the directory is
// synced. A snapshot is written the same way, and segments it wholly
// covers are removed only after it is durable, so a crash at any instant
// leaves a directory that replays to the same state.
//
// # Recovery
//
// The rules Open follows, which need no operator and never guess:
//
//   - An acknowledged append survives any crash: its batch was synced, and
//     nothing is ever written after it in a way that can damage it.
//   - Only the last batch of the newest segment can be incomplete after a
//     crash, and Open recognises it by its shape: the file ends inside it,
//     or its header or payload fails its checks while more of its sectors
//     read as zeros than it had when written (what a write that never
//     fully reached the disk leaves). Open truncates it, records it in
//     [FileJournal.Recovery], and goes on. No record of a partial batch is
//     ever replayed.
//   - Anything else is damage that a crash cannot cause (a flipped bit, a
//     garbled byte, a missing or duplicate segment, a gap in the indexes):
//     Open returns a [*CorruptError] naming the file and the offset of the
//     first bad header or frame, and changes nothing. A length that failed
//     its checksum is never trusted, and a cut never removes a valid batch.
//   - Every Open starts a new segment (unless the newest is empty), after
//     syncing the one before, so that nothing is ever appended after bytes
//     whose durability is unknown (a failed fsync of an earlier process).
//   - [Repair], called on purpose, cuts the journal at the last good
//     record, keeps every byte it removes in a backup that is never
//     overwritten, and leaves a [RepairMark] so that the journal's user
//     knows decisions were lost (see the Loader's handling in package
//     kinesisload).
//
// What Open cannot tell from a crash is damage at the very end of the
// newest segment that reads as zeros: whole 512-byte sectors zeroed inside
// the last batch, or zeros from inside a batch's header to the end of the
// file (which is what a torn write of that batch would leave; the batches
// after it, zeroed too, cannot be told from its own lost pages). Open then
// truncates from that batch on, and reports it in Recovery.
//
// Journals written in the first format (segments of bare frames, no
// batches) open as before and are never appended to again: Open starts a
// format-2 segment after them, so no upgrade step is needed. In such a
// segment a bad last frame is a torn write only when no valid frame of a
// later record follows it.
//
// BENCHMARKS.md in this directory has group-commit figures.
//
// The directory itself is locked with flock(2) while a journal is open
// (exclusively by Open and Repair, shared by [OpenReadOnly]); a second
// Open, in this process or another, fails with [ErrLocked]. Open creates
// no lock file, so a failed Open leaves an existing directory as it was.
// Linux is the target (appends use fdatasync); other Unix systems use
// fsync, and where flock does not exist Open returns an error. [Memory]
// works everywhere.
package journal
