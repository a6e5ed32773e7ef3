// Command inspect prints, for an operator, what a tidemark journal directory
// holds: for every stream, its identity (ARN and creation timestamp), every
// shard with its state, its position and its lineage (as a tree of parents
// and children), the progress archived when a re-created stream was started
// over, and the last journal records, decoded.
//
//	go run ./examples/inspect -dir /var/lib/myapp/tidemark
//
// The directory is the Config.Dir of a kinesisload.Loader. inspect opens the
// journal as the Loader does (journal.Open), so it needs the directory's
// lock: while a Loader runs on the directory, inspect says so and exits with
// status 1 (inspect a copy, cp -r DIR COPY, instead). Like the Loader, Open
// finishes what a crash interrupted (it truncates a torn last write and
// removes temporary files); inspect itself never writes a record.
//
// A journal damaged in a way a crash cannot cause (a CRC mismatch, a missing
// segment) is refused: inspect prints the file, the offset and the reason,
// changes nothing, and exits with status 1. Run it again with -repair to cut
// the journal back to its last good record (journal.Repair): everything after
// the damage is discarded, a copy of every file cut is kept next to it, and
// inspect prints what it cut, why, and where the copies are, then the state.
// A Loader started on a repaired journal resumes from the last good record,
// so it delivers again what it had committed after it (at least once).
//
// A fleet (Loaders sharing a stream through kinesisload/dynamo) keeps its
// state in a DynamoDB table, not in a journal directory: print it with
// `go run . inspect -table T -stream S` in examples/fleet, which is a module
// of its own so that this one does not depend on the DynamoDB client.
//
// Flags:
//
//	-dir DIR     the journal directory (required)
//	-records N   how many of the last journal records to print (default 10;
//	             0 prints none)
//	-repair      repair a corrupt journal first (discards data: only on
//	             purpose)
//
// Exit status: 0 on success, 1 when the journal cannot be read (missing,
// locked, corrupt, or a repair failed), 2 on a bad flag.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command-line flags.
type options struct {
	dir     string
	records int
	repair  bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "dir", "", "the journal directory (`DIR`, the Loader's Config.Dir; required)")
	fs.IntVar(&o.records, "records", 10, "print the last `N` journal records")
	fs.BoolVar(&o.repair, "repair", false, "repair a corrupt journal first: cut it back to its last good record (discards data)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	case o.dir == "":
		return o, errors.New("-dir is required (the Loader's journal directory)")
	case o.records < 0:
		return o, fmt.Errorf("-records %d: must not be negative", o.records)
	}
	return o, nil
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "inspect:", err)
		return 2
	}
	if err := inspect(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "inspect:", err)
		return 1
	}
	return 0
}

// inspect prints the journal in o.dir; its errors are the operator's to read.
func inspect(ctx context.Context, o options, stdout, stderr io.Writer) error {
	segs, snaps, err := journalFiles(o.dir)
	if err != nil {
		return err
	}
	if len(segs) == 0 && len(snaps) == 0 {
		// Open would create an empty journal: an inspector must not.
		return fmt.Errorf("%s holds no journal (no *.seg or *.snap file): is it the Loader's Config.Dir?", o.dir)
	}
	if o.repair {
		if err := repair(o.dir, stdout); err != nil {
			return err
		}
	}

	j, err := journal.OpenReadOnly(o.dir)
	var corrupt *journal.CorruptError
	switch {
	case errors.Is(err, journal.ErrLocked):
		return lockedError(o.dir, err)
	case errors.As(err, &corrupt):
		return fmt.Errorf("the journal in %s is corrupt, in a way a crash cannot cause:\n"+
			"  file:   %s\n  offset: %d\n  reason: %s\n"+
			"Nothing was changed. To cut the journal back to its last good record, run\n"+
			"  inspect -dir %s -repair\n"+
			"This discards every record after the damage (a copy of each file cut is kept\n"+
			"next to it); a Loader then resumes from the last good record and delivers\n"+
			"again what it had committed after it.\n(%w)",
			o.dir, corrupt.File, corrupt.Offset, corrupt.Reason, o.dir, err)
	case err != nil:
		return fmt.Errorf("opening the journal in %s: %w", o.dir, err)
	}
	defer j.Close()

	replayed, err := replay(ctx, j, o.records)
	if err != nil {
		return fmt.Errorf("reading the journal in %s: %w", o.dir, err)
	}
	store, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		return fmt.Errorf("reading the journal in %s: %w", o.dir, err)
	}

	p := &printer{w: stdout}
	p.printf("Journal %s\n", o.dir)
	p.printf("  files:   %s\n", describeFiles(segs, snaps))
	p.printf("  records: %s\n", replayed)
	rec := j.Recovery()
	if rec.Torn != nil {
		p.printf("  torn:    %s (the last write of a crash; the next Open truncates it)\n", rec.Torn)
	}
	if m := rec.Repaired; m != nil {
		p.printf("  repaired: records after %d were removed by a repair at %s; %s\n",
			m.LastIndex, m.Time.Format(time.RFC3339), describeMark(m))
	}

	streams := store.Streams()
	if len(streams) == 0 {
		p.printf("\nNo stream has stored progress yet.\n")
	}
	for _, stream := range streams {
		progress, err := store.Load(ctx, stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		p.printf("\nStream %s: %s\n", stream, countShards(progress))
		id, err := store.Identity(ctx, stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		if id.IsZero() {
			p.printf("  identity: unknown (stored before identities were journaled; the next Run adopts the stream's)\n")
		} else {
			p.printf("  identity: %s\n", id)
		}
		printTree(p, progress, "  ")
		for i, a := range store.Archives(stream) {
			p.printf("  archived %d: the progress of %s, %s, when it was replaced by %s\n",
				i+1, a.Identity, countShards(a.Shards), a.ReplacedBy)
			printTree(p, a.Shards, "    ")
		}
	}

	if o.records > 0 {
		printRecords(p, replayed)
	}
	return p.err
}

// describeMark says how a Loader resumes after the repair m.
func describeMark(m *journal.RepairMark) string {
	if m.LastWrite.IsZero() {
		return "no surviving write time is known, so a Loader refuses to resolve LATEST until each shard's start is set"
	}
	return fmt.Sprintf("a Loader resumes any shard still to be resolved from AT_TIMESTAMP %s minus a margin",
		m.LastWrite.Format(time.RFC3339))
}

// lockedError explains ErrLocked.
func lockedError(dir string, err error) error {
	return fmt.Errorf("%s is locked: a running Loader (or a repair) has the journal open for writing. "+
		"Stop it first, or inspect a copy (cp -r %s COPY; inspect -dir COPY): %w", dir, dir, err)
}

// repair runs journal.Repair and prints its report.
func repair(dir string, stdout io.Writer) error {
	rep, err := journal.Repair(dir)
	if errors.Is(err, journal.ErrLocked) {
		return lockedError(dir, err)
	}
	p := &printer{w: stdout}
	p.printf("Repair of %s:\n", dir)
	if len(rep.Cuts) == 0 && err == nil {
		p.printf("  nothing to repair: the journal is sound.\n\n")
		return p.err
	}
	for i, c := range rep.Cuts {
		p.printf("  %d. %s\n", i+1, c.File)
		if c.Reason != nil {
			p.printf("     why:    damage at offset %d of %s: %s\n", c.Reason.Offset, c.Reason.File, c.Reason.Reason)
		}
		if c.Offset < 0 {
			p.printf("     what:   moved aside whole (%d bytes)\n", c.Bytes)
		} else {
			p.printf("     what:   truncated at offset %d (%d bytes cut)\n", c.Offset, c.Bytes)
		}
		p.printf("     backup: %s\n", c.Backup)
	}
	if err != nil {
		return fmt.Errorf("repair of %s stopped: %w", dir, err)
	}
	p.printf("  The journal now ends at its last good record: a Loader resumes each shard from\n")
	p.printf("  the position below and delivers again what it had committed after it. If the\n")
	p.printf("  cut removed a shard's resolved start, the shard shows LATEST (or is missing)\n")
	p.printf("  below, and a Loader would resolve LATEST again, after records that arrived\n")
	p.printf("  meanwhile; check before you start one. Keep the backups until you are sure.\n\n")
	return p.err
}

// journalFiles lists the segment and snapshot files of dir.
func journalFiles(dir string) (segs, snaps []string, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, nil, err // names the directory
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("%s is not a directory", dir)
	}
	if segs, err = filepath.Glob(filepath.Join(dir, "*.seg")); err != nil {
		return nil, nil, err
	}
	if snaps, err = filepath.Glob(filepath.Join(dir, "*.snap")); err != nil {
		return nil, nil, err
	}
	return segs, snaps, nil
}

func describeFiles(segs, snaps []string) string {
	var parts []string
	for _, group := range []struct {
		what  string
		names []string
	}{{"segment", segs}, {"snapshot", snaps}} {
		if len(group.names) == 0 {
			continue
		}
		var size int64
		var names []string
		for _, n := range group.names {
			if st, err := os.Stat(n); err == nil {
				size += st.Size()
			}
			names = append(names, filepath.Base(n))
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %d bytes)", plural(len(names), group.what), strings.Join(names, ", "), size))
	}
	return strings.Join(parts, "; ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// entry is one replayed journal record.
type entry struct {
	index uint64
	data  []byte
}

// replayed is what inspect keeps of a replay: the snapshot's index, how
// many records follow it, and the last of them.
type replayed struct {
	snapshot    bool
	snapIndex   uint64
	count       int
	first, last uint64
	tail        []entry // the last records, at most keep
}

// replay reads the journal, keeping only the last keep records' data.
func replay(ctx context.Context, j journal.Journal, keep int) (replayed, error) {
	var r replayed
	err := j.Replay(ctx, func(e journal.Entry) error {
		if e.Snapshot {
			r.snapshot, r.snapIndex = true, e.Index
			return nil
		}
		if r.count == 0 {
			r.first = e.Index
		}
		r.count++
		r.last = e.Index
		if keep > 0 {
			if len(r.tail) == keep {
				r.tail = slices.Delete(r.tail, 0, 1)
			}
			r.tail = append(r.tail, entry{index: e.Index, data: slices.Clone(e.Data)})
		}
		return nil
	})
	return r, err
}

func (r replayed) String() string {
	var span string
	switch r.count {
	case 0:
		span = "no record"
	case 1:
		span = fmt.Sprintf("1 record (%d)", r.first)
	default:
		span = fmt.Sprintf("%d records (%d to %d)", r.count, r.first, r.last)
	}
	if !r.snapshot {
		return span
	}
	return fmt.Sprintf("a snapshot covering 1 to %d, then %s", r.snapIndex, span)
}

func countShards(progress map[string]kinesisload.ShardProgress) string {
	counts := map[kinesisload.ShardState]int{}
	for _, p := range progress {
		counts[p.State]++
	}
	var parts []string
	for s := kinesisload.StateDiscovered; s <= kinesisload.StateCompleted; s++ {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return plural(len(progress), "shard") + " (" + strings.Join(parts, ", ") + ")"
}

// printTree prints the shards as a lineage forest, each line indented by
// indent: each shard under its first parent that the store knows, roots (no
// known parent) first, all in shard-ID order. A merged shard's second parent
// is named on its line.
func printTree(p *printer, progress map[string]kinesisload.ShardProgress, indent string) {
	children := map[string][]string{}
	var roots []string
	for _, id := range slices.Sorted(maps.Keys(progress)) {
		parent := ""
		for _, par := range progress[id].Parents {
			if _, ok := progress[par]; ok {
				parent = par
				break
			}
		}
		if parent == "" {
			roots = append(roots, id)
		} else {
			children[parent] = append(children[parent], id)
		}
	}
	type row struct{ tree, id string }
	var rows []row
	var walk func(id, prefix, branch string)
	walk = func(id, prefix, branch string) {
		rows = append(rows, row{tree: prefix + branch + id, id: id})
		kids := children[id]
		next := prefix
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		for i, k := range kids {
			b := "├─ "
			if i == len(kids)-1 {
				b = "└─ "
			}
			walk(k, next, b)
		}
	}
	for _, r := range roots {
		walk(r, indent, "")
	}
	width := 0
	for _, r := range rows {
		width = max(width, len([]rune(r.tree)))
	}
	for _, r := range rows {
		sp := progress[r.id]
		pos := "(no position)"
		if sp.Position.Kind != 0 {
			pos = sp.Position.String()
		}
		state := "(no state)"
		if sp.State != 0 {
			state = sp.State.String()
		}
		line := fmt.Sprintf("%s%s  %-14s  %s", r.tree, strings.Repeat(" ", width-len([]rune(r.tree))), state, pos)
		if len(sp.Parents) > 0 {
			line += "  parents: " + strings.Join(sp.Parents, ", ")
		}
		p.printf("%s\n", line)
	}
}

// storeRecord is one record of a JournalStore, one Save, as
// kinesisload/store.go writes it:
//
//	{"stream":"orders","updates":[{"id":"shardId-000000000001","parents":["shardId-000000000000"],
//	  "state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:4960..."}]}
//
// A snapshot's state is {"streams":{"orders":{"shardId-...":{...}}}}; the
// state printed comes from kinesisload.JournalStore itself, not from this.
//
// A Save too large for one record is several parts ("batch", "part") and a
// commit ("commit", "parts"): its parts count only once the commit is
// there. A record with "prune" drops shards that Kinesis no longer lists.
// A record may also journal the stream's identity, or start the stream over
// (archiving its progress):
//
//	{"stream":"orders","identity":{"arn":"arn:aws:kinesis:...","created":"2026-..."}}
//	{"stream":"orders","gen":0,"identity":{...},"start_over":true}
type storeRecord struct {
	Stream    string                      `json:"stream"`
	Updates   []kinesisload.ShardProgress `json:"updates"`
	Batch     string                      `json:"batch"`
	Part      int                         `json:"part"`
	Commit    string                      `json:"commit"`
	Parts     int                         `json:"parts"`
	Prune     []string                    `json:"prune"`
	Identity  *kinesisload.StreamIdentity `json:"identity"`
	StartOver bool                        `json:"start_over"`
}

// printRecords prints the last journal records, decoded.
func printRecords(p *printer, r replayed) {
	recs := r.tail
	switch {
	case len(recs) == 0 && r.snapshot:
		p.printf("\nNo journal record after the snapshot.\n")
		return
	case len(recs) == 0:
		p.printf("\nNo journal record.\n")
		return
	}
	what := plural(len(recs), "journal record")
	if len(recs) == 1 {
		what = "journal record"
	}
	if r.snapshot {
		what += " after the snapshot"
	}
	p.printf("\nLast %s (each is one durable Save: the updates it merged):\n", what)
	for _, e := range recs {
		var r storeRecord
		if err := json.Unmarshal(e.data, &r); err != nil {
			// Not a JournalStore record: show it raw rather than fail.
			p.printf("  #%d  cannot be decoded (%v): %q\n", e.index, err, truncate(e.data, 200))
			continue
		}
		p.printf("  #%d  stream %s\n", e.index, r.Stream)
		switch {
		case r.Batch != "":
			p.printf("        part %d of batch %s (applied only with its commit)\n", r.Part, r.Batch)
		case r.Commit != "":
			p.printf("        commit of batch %s (%d parts)\n", r.Commit, r.Parts)
		case len(r.Prune) > 0:
			p.printf("        pruned %s\n", strings.Join(r.Prune, ", "))
		case r.StartOver && r.Identity != nil:
			p.printf("        started over: the progress was archived; the stream is now %s\n", *r.Identity)
		case r.Identity != nil:
			p.printf("        identity: %s\n", *r.Identity)
		}
		for _, u := range r.Updates {
			parts := []string{u.ShardID}
			if u.State != 0 {
				parts = append(parts, u.State.String())
			}
			if u.Position.Kind != 0 {
				parts = append(parts, u.Position.String())
			}
			if len(u.Parents) > 0 {
				parts = append(parts, "parents: "+strings.Join(u.Parents, ", "))
			}
			p.printf("        %s\n", strings.Join(parts, "  "))
		}
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// printer writes formatted text and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, args...)
}
