package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// shardView is one shard as a target holds it.
type shardView struct {
	Progress kinesisload.ShardProgress
	// Owner, Epoch and HandoffTo are a fleet's lease (empty and 0 for a
	// journal).
	Owner     string
	Epoch     uint64
	HandoffTo string
	// Rewind is the shard's last rewind, if any.
	Rewind *kinesisload.Rewind
}

// streamView is a stream's progress as a target holds it.
type streamView struct {
	Stream   string
	Identity kinesisload.StreamIdentity
	Shards   map[string]shardView
	// Archived counts the generations archived by start-overs.
	Archived int
	// A fleet's: its generation, whether its initialisation is
	// committed, T0 and the hosts' heartbeats.
	Generation  uint64
	Initialised bool
	StartTime   time.Time
	Hosts       map[string]fleet.HostInfo
}

// progress returns the shards' progress by ID.
func (v streamView) progress() map[string]kinesisload.ShardProgress {
	out := make(map[string]kinesisload.ShardProgress, len(v.Shards))
	for id, sh := range v.Shards {
		out[id] = sh.Progress
	}
	return out
}

// target is where positions are kept: a journal directory or a fleet's
// table.
type target interface {
	// String names it for the operator: "journal DIR", "table T".
	String() string
	// Streams lists the streams it holds progress of.
	Streams(ctx context.Context) ([]string, error)
	// View reads a stream's progress.
	View(ctx context.Context, stream string) (streamView, error)
	// Rewind moves shards' positions (see kinesisload.JournalStore.Rewind
	// and fleet.Rewind).
	Rewind(ctx context.Context, stream string, r kinesisload.Rewind, to map[string]scan.Position) ([]kinesisload.Rewind, error)
	// Import writes progress for a stream it holds nothing of.
	Import(ctx context.Context, stream string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress) error
	Close() error
}

// openTarget opens --dir or --table. A journal opened for writing is
// locked (a Loader holding it refuses); for reading, a journal a Loader
// holds is read from a copy. create makes a missing journal directory or
// table.
func openTarget(ctx context.Context, env Env, o *Options, write, create bool) (target, error) {
	if o.Table != "" {
		t, err := env.Table(ctx, o, create)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", o.Table, err)
		}
		return &fleetTarget{name: o.Table, table: t}, nil
	}
	if write {
		return openJournalWrite(ctx, o.Dir, create)
	}
	return openJournalRead(ctx, o.Dir)
}

// journalTarget is a Loader's journal directory.
type journalTarget struct {
	dir string
	j   journal.Journal
	st  *kinesisload.JournalStore
	// running says a Loader held the directory when it was opened;
	// copied that it was read from a copy (then tmp is the copy).
	running, copied bool
	tmp             string
}

func (t *journalTarget) String() string { return "journal " + t.dir }

// hasJournal reports whether dir holds journal files.
func hasJournal(dir string) (bool, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return false, err
	}
	if !st.IsDir() {
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	for _, pat := range []string{"*.seg", "*.snap"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return false, err
		}
		if len(m) > 0 {
			return true, nil
		}
	}
	return false, nil
}

func explainOpen(dir string, err error) error {
	var corrupt *journal.CorruptError
	switch {
	case errors.Is(err, journal.ErrLocked):
		return fmt.Errorf("%s is locked: a running Loader has the journal open; stop it first (a Loader keeps its own view of the positions and would commit past a change made under it; a fleet, --table, can be changed while its hosts run): %w", dir, err)
	case errors.As(err, &corrupt):
		return fmt.Errorf("the journal in %s is corrupt (file %s, offset %d: %s); nothing was changed; see examples/inspect -repair: %w",
			dir, corrupt.File, corrupt.Offset, corrupt.Reason, err)
	}
	return fmt.Errorf("opening the journal in %s: %w", dir, err)
}

// openJournalWrite opens dir for writing; without create it must hold a
// journal already.
func openJournalWrite(ctx context.Context, dir string, create bool) (*journalTarget, error) {
	ok, err := hasJournal(dir)
	switch {
	case err != nil && !(create && errors.Is(err, os.ErrNotExist)):
		return nil, err
	case !ok && !create:
		return nil, fmt.Errorf("%s holds no journal (no *.seg or *.snap file): is it the Loader's Config.Dir?", dir)
	}
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		return nil, explainOpen(dir, err)
	}
	st, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("reading the journal in %s: %w", dir, err)
	}
	return &journalTarget{dir: dir, j: j, st: st}, nil
}

// openJournalRead opens dir for reading. When a Loader holds it, its
// files are copied (a torn last write in the copy is truncated there)
// and the copy is read; a copy caught in the middle of a compaction is
// taken again.
func openJournalRead(ctx context.Context, dir string) (*journalTarget, error) {
	ok, err := hasJournal(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s holds no journal (no *.seg or *.snap file): is it the Loader's Config.Dir?", dir)
	}
	held, err := journal.Held(dir)
	if err != nil {
		return nil, err
	}
	if !held {
		j, err := journal.OpenReadOnly(dir)
		switch {
		case err == nil:
			st, err := kinesisload.NewJournalStore(ctx, j, 0)
			if err != nil {
				j.Close()
				return nil, fmt.Errorf("reading the journal in %s: %w", dir, err)
			}
			return &journalTarget{dir: dir, j: j, st: st}, nil
		case !errors.Is(err, journal.ErrLocked):
			return nil, explainOpen(dir, err)
		}
		// A Loader took it meanwhile: read a copy.
	}
	var errs []error
	for range 3 {
		t, err := readCopy(ctx, dir)
		if err == nil {
			return t, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("reading a copy of %s (a Loader holds it): %w", dir, errors.Join(errs...))
}

func readCopy(ctx context.Context, dir string) (*journalTarget, error) {
	tmp, err := os.MkdirTemp("", "tidemark-journal-copy-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*journalTarget, error) {
		os.RemoveAll(tmp)
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fail(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".seg") || strings.HasSuffix(name, ".snap") || name == "REPAIRED") {
			continue
		}
		if err := copyFile(filepath.Join(dir, name), filepath.Join(tmp, name)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // compacted away meanwhile: a snapshot covers it
			}
			return fail(err)
		}
	}
	j, err := journal.Open(tmp, journal.DefaultConfig())
	if err != nil {
		return fail(explainOpen(dir+" (a copy)", err))
	}
	st, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		j.Close()
		return fail(err)
	}
	return &journalTarget{dir: dir, j: j, st: st, running: true, copied: true, tmp: tmp}, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (t *journalTarget) Streams(ctx context.Context) ([]string, error) { return t.st.Streams(), nil }

func (t *journalTarget) View(ctx context.Context, stream string) (streamView, error) {
	progress, err := t.st.Load(ctx, stream)
	if err != nil {
		return streamView{}, err
	}
	id, err := t.st.Identity(ctx, stream)
	if err != nil {
		return streamView{}, err
	}
	rws, err := t.st.Rewinds(ctx, stream)
	if err != nil {
		return streamView{}, err
	}
	v := streamView{Stream: stream, Identity: id, Shards: map[string]shardView{}, Archived: len(t.st.Archives(stream))}
	for id, p := range progress {
		sv := shardView{Progress: p}
		if rw, ok := rws[id]; ok {
			sv.Rewind = &rw
		}
		v.Shards[id] = sv
	}
	return v, nil
}

func (t *journalTarget) Rewind(ctx context.Context, stream string, r kinesisload.Rewind, to map[string]scan.Position) ([]kinesisload.Rewind, error) {
	return t.st.Rewind(ctx, stream, r, to)
}

func (t *journalTarget) Import(ctx context.Context, stream string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress) error {
	stored, err := t.st.Load(ctx, stream)
	if err != nil {
		return err
	}
	have, err := t.st.Identity(ctx, stream)
	if err != nil {
		return err
	}
	switch {
	case len(stored) > 0:
		return fmt.Errorf("%s already holds progress of stream %s (%d shards): import needs a journal that holds none; to move its positions, rewind them (tidemark rewind --from FILE)", t, stream, len(stored))
	case !have.IsZero() && !id.IsZero() && !have.Equal(id):
		return fmt.Errorf("%s holds stream %s as %s, the import %s", t, stream, have, id)
	}
	if !id.IsZero() && have.IsZero() {
		if err := t.st.SetIdentity(ctx, stream, id); err != nil {
			return err
		}
	}
	// Saved into an empty stream, every update is stored as it is.
	return t.st.Save(ctx, stream, shards)
}

func (t *journalTarget) Close() error {
	err := t.j.Close()
	if t.tmp != "" {
		os.RemoveAll(t.tmp)
	}
	return err
}

// fleetTarget is a fleet's table.
type fleetTarget struct {
	name  string
	table fleet.Table
}

func (t *fleetTarget) String() string { return "table " + t.name }

func (t *fleetTarget) Streams(ctx context.Context) ([]string, error) {
	return nil, errors.New("a table's streams are not listed: give --stream")
}

func (t *fleetTarget) View(ctx context.Context, stream string) (streamView, error) {
	info, err := fleet.Inspect(ctx, t.table, stream)
	if err != nil {
		return streamView{}, err
	}
	rws, err := fleet.Rewinds(ctx, t.table, stream)
	if err != nil {
		return streamView{}, err
	}
	v := streamView{Stream: stream, Identity: info.Identity, Shards: map[string]shardView{}, Archived: len(info.Archived),
		Generation: info.Generation, Initialised: info.Initialised, StartTime: info.StartTime, Hosts: maps.Clone(info.Hosts)}
	for id, sh := range info.Shards {
		sv := shardView{Progress: sh.Progress, Owner: sh.Owner, Epoch: sh.Epoch, HandoffTo: sh.HandoffTo}
		if rw, ok := rws[id]; ok {
			sv.Rewind = &rw
		}
		v.Shards[id] = sv
	}
	return v, nil
}

func (t *fleetTarget) Rewind(ctx context.Context, stream string, r kinesisload.Rewind, to map[string]scan.Position) ([]kinesisload.Rewind, error) {
	return fleet.Rewind(ctx, t.table, stream, r, to)
}

func (t *fleetTarget) Import(ctx context.Context, stream string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress) error {
	return fleet.Import(ctx, t.table, stream, id, shards)
}

func (t *fleetTarget) Close() error { return nil }

// pickStream returns o.Stream, or the journal's only stream.
func pickStream(ctx context.Context, t target, o *Options) (string, error) {
	if o.Stream != "" {
		return o.Stream, nil
	}
	streams, err := t.Streams(ctx)
	if err != nil {
		return "", err
	}
	switch len(streams) {
	case 0:
		return "", fmt.Errorf("%s holds no stream's progress", t)
	case 1:
		return streams[0], nil
	}
	return "", usagef("%s holds several streams (%s): give --stream", t, strings.Join(slices.Sorted(slices.Values(streams)), ", "))
}
