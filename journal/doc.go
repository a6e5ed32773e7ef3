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
// digits), snapshot files (<index>.snap) and a LOCK file. A segment starts
// with an 8-byte magic and holds frames; a snapshot holds the magic and one
// frame. A frame is 8-byte aligned: a little-endian uint64 length word
// whose low 56 bits are the body length and whose top byte is
// 0x80|padding (unlike etcd, the 0x80 bit is always set, so a zero word
// always means "no frame here"), then the body: a CRC-32C (Castagnoli) of
// the data followed by the index, the record index (little-endian uint64)
// and the data, then 0 to 7 zero bytes of padding. (Hashing the data first
// lets each appender checksum its own data; the writer then only extends
// the CRC with the index it assigns.)
//
// Appends are written, then fdatasync'ed, before Append returns; concurrent
// appenders share one write and one fsync (group commit, by a single
// writer goroutine). New files are written to a temporary name, synced,
// renamed and then the directory is synced. A snapshot is written the same
// way, and segments it wholly covers are removed only after it is durable,
// oldest first, so a crash at any instant leaves a directory that replays to
// the same state.
//
// On [Open], damage at the end of the newest segment that a crash can
// cause is a torn write: it is truncated and Open goes on. A torn write is
// fewer than 8 bytes left after the last good frame; a frame cut short by
// the end of the file (with a length a record can have, and no frame of
// the next record after it, which is what a flipped bit in a length word
// would leave); or a file that is zero from the start of a bad frame, or
// from a 512-byte sector boundary inside it, to its end. Anything else (a CRC mismatch or garbage
// before the tail, a missing or duplicate segment, a gap in the indexes) is
// a hard error, a [*CorruptError] naming the file and offset that wraps
// [ErrCorrupt], and Open changes nothing on disk. [Repair], called on
// purpose, keeps a copy of the damaged file and cuts the journal at the last
// good record.
//
// BENCHMARKS.md in this directory has group-commit figures.
//
// The directory is locked with flock(2) on its LOCK file while a journal is
// open; a second Open, in this process or another, fails with [ErrLocked].
// Linux is the target (appends use fdatasync); other Unix systems use
// fsync, and where flock does not exist Open returns an error. [Memory]
// works everywhere.
package journal
