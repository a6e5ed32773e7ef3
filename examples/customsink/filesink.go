package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// FileSink is a [kinesisload.Sink] that stores every delivered batch as one
// NDJSON file in a directory, atomically and durably. Copy it as the
// starting point of your own Sink: the comments say why each step is there.
//
// Each batch becomes the file FileName(stream, shard, first, last), where
// first and last are the sequence numbers of its first and last record.
// The file is written under a temporary name in the same directory
// (".NAME.tmp-RANDOM", which never matches the final name pattern), synced,
// renamed to its final name, and then the directory is synced: a reader
// listing the directory sees complete files only, and Deliver returns nil
// only once both the data and the name are durable.
//
// Delivery is at least once: the Loader delivers a batch again when Deliver
// failed, and after a crash between Deliver and the durable commit of the
// batch's checkpoint. FileSink makes that harmless, so every record lands
// in exactly one line of one file:
//   - a batch delivered again as is gets the same file name, so it
//     overwrites its own file (rename replaces atomically);
//   - FileSink remembers, per shard, the last sequence number it has
//     durably stored (on first use it reads it back from the file names in
//     the directory), and skips the records at or below it. This matters
//     after a restart: the Loader then reads again from its last committed
//     checkpoint, and the page it gets may hold more records than the batch
//     that was stored before the crash, so its first/last sequence numbers,
//     and its file name, differ.
//
// Only one FileSink (one process) may write a directory at a time.
//
// A FileSink is safe for concurrent use: the Loader calls Deliver
// concurrently for different shards, never concurrently for one shard.
type FileSink struct {
	dir string
	ops fileOps

	mu      sync.Mutex
	scanned bool
	// stored is the last sequence number durably stored per shard;
	// a shard with nothing stored is absent.
	stored map[shardKey]string
}

var _ kinesisload.Sink = (*FileSink)(nil)

// shardKey names one shard of one stream.
type shardKey struct{ stream, shard string }

// fileOps are the file-system steps that can fail after the data is
// written; tests replace them to inject failures.
type fileOps struct {
	rename  func(oldpath, newpath string) error
	syncDir func(dir string) error
}

// Line is one line of a FileSink file: one Kinesis record.
//
// Data is the payload, base64-encoded (standard alphabet, padded), always:
// it is lossless for any bytes and unambiguous (a payload that happens to
// look like base64 cannot be mistaken for it), and it is what the Kinesis
// API itself uses for Data in JSON. Decode it with `jq -r .data | base64 -d`,
// or with encoding/json into a []byte.
type Line struct {
	Stream       string `json:"stream"`
	Shard        string `json:"shard"`
	Seq          string `json:"seq"`
	SubSeq       int64  `json:"subseq"`
	PartitionKey string `json:"partition_key"`
	// Arrival is the record's ApproximateArrivalTimestamp in RFC 3339,
	// UTC, milliseconds: "2026-11-30T08:18:16.123Z".
	Arrival string `json:"arrival"`
	Data    []byte `json:"data"`
}

// arrivalFormat is the layout of Line.Arrival.
const arrivalFormat = "2006-01-02T15:04:05.000Z07:00"

// NewFileSink returns a FileSink that writes into dir, creating it if
// needed.
func NewFileSink(dir string) (*FileSink, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("customsink: output directory: %w", err)
	}
	return &FileSink{
		dir:    dir,
		ops:    fileOps{rename: os.Rename, syncDir: syncDir},
		stored: map[shardKey]string{},
	}, nil
}

// Dir returns the directory the sink writes into.
func (s *FileSink) Dir() string { return s.dir }

// Deliver implements [kinesisload.Sink]: it stores b's records not stored
// yet as one file, and returns nil only once the file and its name are
// durable. Any error (a full disk, a failed fsync, a cancelled ctx) is
// returned as is, so that the Loader retries the batch; nothing partial is
// ever visible under a final file name.
func (s *FileSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	if len(b.Records) == 0 {
		return nil // only a TransactionalSink gets empty batches
	}
	key := shardKey{b.Stream, b.ShardID}
	last, err := s.lastStored(key)
	if err != nil {
		return err
	}
	recs := b.Records
	if last != "" {
		// Skip what an earlier delivery stored already. Records of a
		// batch are consecutive and in shard order, and the user records
		// of a KPL aggregate (one sequence number) are never split
		// across batches: comparing sequence numbers is enough.
		i := 0
		for i < len(recs) && scan.CompareSequence(recs[i].SequenceNumber, last) <= 0 {
			i++
		}
		recs = recs[i:]
	}
	if len(recs) == 0 {
		return nil // everything is stored already: nothing to do
	}
	name, err := FileName(b.Stream, b.ShardID, recs[0].SequenceNumber, recs[len(recs)-1].SequenceNumber)
	if err != nil {
		return err
	}
	data, err := encodeLines(b.Stream, b.ShardID, recs)
	if err != nil {
		return fmt.Errorf("customsink: stream %s, shard %s: %w", b.Stream, b.ShardID, err)
	}
	if err := s.writeAtomic(ctx, name, data); err != nil {
		return fmt.Errorf("customsink: stream %s, shard %s: %w", b.Stream, b.ShardID, err)
	}
	s.mu.Lock()
	s.stored[key] = recs[len(recs)-1].SequenceNumber
	s.mu.Unlock()
	return nil
}

// LastStored returns the sequence number of the last record of the shard
// that the sink has durably stored, or "" when it has stored none.
func (s *FileSink) LastStored(stream, shardID string) (string, error) {
	return s.lastStored(shardKey{stream, shardID})
}

// lastStored returns the last sequence number stored for key. The first
// call reads the directory.
func (s *FileSink) lastStored(key shardKey) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.scanned {
		if err := s.scan(); err != nil {
			return "", err
		}
		s.scanned = true
	}
	return s.stored[key], nil
}

// scan reads back, from the file names, the last sequence number stored for
// every shard. Called with s.mu held.
func (s *FileSink) scan() error {
	files, err := ListFiles(s.dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		k := shardKey{f.Stream, f.Shard}
		if cur, ok := s.stored[k]; !ok || scan.CompareSequence(f.Last, cur) > 0 {
			s.stored[k] = f.Last
		}
	}
	// A file from a run that failed between its rename and the directory
	// sync may be visible but not durable yet; the sink is about to rely
	// on it, so make every name durable now.
	if err := s.ops.syncDir(s.dir); err != nil {
		return fmt.Errorf("customsink: syncing directory %s: %w", s.dir, err)
	}
	return nil
}

// writeAtomic makes data visible as dir/name, complete and durable, or
// not at all.
func (s *FileSink) writeAtomic(ctx context.Context, name string, data []byte) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	final := filepath.Join(s.dir, name)
	// The temporary file is in the same directory, so the rename is
	// atomic (same file system), and its name starts with a dot and does
	// not end in .ndjson, so it never matches the final pattern.
	tmp, err := os.CreateTemp(s.dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating a temporary file for %s: %w", final, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	// The data must be on disk before the name points at it: otherwise a
	// crash could leave the final name on an empty or short file.
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	// Last chance to give up cleanly when the Loader is stopped hard.
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.ops.rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp.Name(), final, err)
	}
	// The rename is durable only once the directory is synced. If this
	// fails, the final file may be visible but not durable, so Deliver
	// fails and the Loader delivers the batch again, which overwrites it.
	if err := s.ops.syncDir(s.dir); err != nil {
		return fmt.Errorf("syncing directory %s after writing %s: %w", s.dir, name, err)
	}
	return nil
}

// encodeLines returns recs as NDJSON lines.
func encodeLines(stream, shard string, recs []kinesisload.Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		l := Line{
			Stream:       stream,
			Shard:        shard,
			Seq:          r.SequenceNumber,
			SubSeq:       r.SubSequenceNumber,
			PartitionKey: r.PartitionKey,
			Arrival:      r.ArrivalTime.UTC().Format(arrivalFormat),
			Data:         r.Data,
		}
		if err := enc.Encode(l); err != nil { // Encode ends each line with \n
			return nil, fmt.Errorf("record %s: %w", r.SequenceNumber, err)
		}
	}
	return buf.Bytes(), nil
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Names of the files. FileName builds them and ParseFileName reads them
// back; nothing else does either.
var (
	// streamRE is what Kinesis allows in a stream name.
	streamRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)
	// shardRE is what the sink allows in a shard ID: Kinesis's are
	// "shardId-" and 12 digits. No dot, so a name splits unambiguously.
	shardRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	seqRE   = regexp.MustCompile(`^[0-9]{1,128}$`)
	// fileRE is the final name pattern: STREAM.SHARD.FIRST-LAST.ndjson.
	fileRE = regexp.MustCompile(`^([a-zA-Z0-9_.-]{1,128})\.([a-zA-Z0-9_-]{1,128})\.([0-9]{1,128})-([0-9]{1,128})\.ndjson$`)
)

// FileExt is the extension of every file a FileSink writes.
const FileExt = ".ndjson"

// FileName returns the name of the file that holds the records first to last
// of a shard: "STREAM.SHARD.FIRST-LAST.ndjson", for example
// "orders.shardId-000000000001.4959...-4959....ndjson".
func FileName(stream, shard, first, last string) (string, error) {
	switch {
	case !streamRE.MatchString(stream):
		return "", fmt.Errorf("customsink: stream name %q: want 1 to 128 of a-z A-Z 0-9 _ . -", stream)
	case !shardRE.MatchString(shard):
		return "", fmt.Errorf("customsink: stream %s: shard ID %q: want 1 to 128 of a-z A-Z 0-9 _ -", stream, shard)
	case !seqRE.MatchString(first):
		return "", fmt.Errorf("customsink: stream %s, shard %s: sequence number %q is not decimal", stream, shard, first)
	case !seqRE.MatchString(last):
		return "", fmt.Errorf("customsink: stream %s, shard %s: sequence number %q is not decimal", stream, shard, last)
	}
	return stream + "." + shard + "." + first + "-" + last + FileExt, nil
}

// File is a file of a FileSink's directory, as its name describes it.
type File struct {
	Path          string
	Stream, Shard string
	First, Last   string
}

// ParseFileName reads back what FileName built; ok is false for any other
// name, temporary files included.
func ParseFileName(name string) (f File, ok bool) {
	m := fileRE.FindStringSubmatch(name)
	if m == nil {
		return File{}, false
	}
	return File{Path: name, Stream: m[1], Shard: m[2], First: m[3], Last: m[4]}, true
}

// ListFiles returns the complete files in dir (those whose names match the
// final pattern), in stream, shard and sequence order. Temporary files are
// not listed.
func ListFiles(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("customsink: listing %s: %w", dir, err)
	}
	var files []File
	for _, e := range entries {
		f, ok := ParseFileName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		f.Path = filepath.Join(dir, e.Name())
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b File) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		if c := strings.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return scan.CompareSequence(a.First, b.First)
	})
	return files, nil
}

// ReadLines decodes every line of a FileSink file.
func ReadLines(path string) ([]Line, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("customsink: %w", err)
	}
	var lines []Line
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20) // a record is at most 1 MiB, 1.4 MiB in base64
	for n := 1; sc.Scan(); n++ {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("customsink: %s line %d: %w", path, n, err)
		}
		if _, err := time.Parse(time.RFC3339Nano, l.Arrival); err != nil {
			return nil, fmt.Errorf("customsink: %s line %d: arrival: %w", path, n, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("customsink: reading %s: %w", path, err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("customsink: %s: %w", path, errors.New("last line has no newline (not a complete file)"))
	}
	return lines, nil
}
