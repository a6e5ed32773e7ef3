package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// ExportFormat names the format of an export file; import refuses others.
const ExportFormat = "tidemark-positions/1"

// Export is an export file: a stream's positions and lineage.
type Export struct {
	Format string `json:"format"`
	Stream string `json:"stream"`
	// Identity is the stream the positions are of (absent when the
	// source stored none).
	Identity *kinesisload.StreamIdentity `json:"identity,omitempty"`
	// Source and ExportedAt say where and when the file was made.
	Source     string        `json:"source"`
	ExportedAt time.Time     `json:"exported_at"`
	Shards     []ExportShard `json:"shards"`
}

// ExportShard is one shard of an [Export].
type ExportShard struct {
	Shard string `json:"shard"`
	// State is the shard's state (ACTIVE, COMPLETED, ...).
	State kinesisload.ShardState `json:"state"`
	// Position is where reading resumes, as scan.Parse reads it.
	Position string   `json:"position,omitempty"`
	Parents  []string `json:"parents,omitempty"`
}

// progress turns the file's shards into progress, checking each; errors
// name the file and the shard.
func (e *Export) progress(file string) ([]kinesisload.ShardProgress, error) {
	seen := map[string]bool{}
	out := make([]kinesisload.ShardProgress, 0, len(e.Shards))
	for i, sh := range e.Shards {
		if sh.Shard == "" {
			return nil, fmt.Errorf("%s: shards[%d] has no shard ID", file, i)
		}
		if seen[sh.Shard] {
			return nil, fmt.Errorf("%s: shard %s is listed twice", file, sh.Shard)
		}
		seen[sh.Shard] = true
		p := kinesisload.ShardProgress{ShardID: sh.Shard, State: sh.State, Parents: slices.Clone(sh.Parents)}
		if sh.Position != "" {
			pos, err := scan.Parse(sh.Position)
			if err != nil {
				return nil, fmt.Errorf("%s: shard %s: position %q: %w", file, sh.Shard, sh.Position, err)
			}
			p.Position = pos
		}
		if err := kinesisload.CheckRestore(p); err != nil {
			return nil, fmt.Errorf("%s: shard %s: %w", file, sh.Shard, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// readExport reads and checks an export file; errors name the file and,
// for bad JSON, the offset.
func readExport(file string) (*Export, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var e Export
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("%s: not JSON at offset %d: %w", file, se.Offset, err)
		case errors.As(err, &te):
			return nil, fmt.Errorf("%s: field %s at offset %d: %w", file, te.Field, te.Offset, err)
		}
		if where := locateExportError(b); where != "" {
			return nil, fmt.Errorf("%s: %s: %w", file, where, err)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	switch {
	case e.Format != ExportFormat:
		return nil, fmt.Errorf("%s: format %q, want %q (a file made by tidemark export)", file, e.Format, ExportFormat)
	case e.Stream == "":
		return nil, fmt.Errorf("%s: no stream", file)
	}
	if _, err := e.progress(file); err != nil {
		return nil, err
	}
	return &e, nil
}

// locateExportError names the field of an export file whose value its
// decoder refused (a shard's state, the export's time), which the JSON
// decoder's error does not: "exported_at", or the shard's index and ID.
// It returns "" when it finds none.
func locateExportError(b []byte) string {
	var loose struct {
		ExportedAt json.RawMessage   `json:"exported_at"`
		Shards     []json.RawMessage `json:"shards"`
	}
	if json.Unmarshal(b, &loose) != nil {
		return ""
	}
	if len(loose.ExportedAt) > 0 {
		var t time.Time
		if json.Unmarshal(loose.ExportedAt, &t) != nil {
			return "field exported_at"
		}
	}
	for i, raw := range loose.Shards {
		var sh ExportShard
		if json.Unmarshal(raw, &sh) != nil {
			var id struct {
				Shard string `json:"shard"`
			}
			_ = json.Unmarshal(raw, &id)
			return fmt.Sprintf("shards[%d] (shard %q)", i, id.Shard)
		}
	}
	return ""
}

// exportOf makes the export of a stream's view.
func exportOf(v streamView, source string, now time.Time) *Export {
	e := &Export{Format: ExportFormat, Stream: v.Stream, Source: source, ExportedAt: now.UTC(), Shards: []ExportShard{}}
	if !v.Identity.IsZero() {
		id := v.Identity
		e.Identity = &id
	}
	for _, id := range slices.Sorted(maps.Keys(v.Shards)) {
		p := v.Shards[id].Progress
		sh := ExportShard{Shard: id, State: p.State, Parents: p.Parents}
		if p.Position.Kind != 0 {
			sh.Position = p.Position.String()
		}
		e.Shards = append(e.Shards, sh)
	}
	return e
}

func exportCmd(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flags("export", &o, stderr)
	out := fs.String("out", "", "write to `FILE` (default: standard output)")
	err := parse(fs, args, 0)
	if err == nil {
		err = checkTarget(&o, false)
	}
	if err != nil {
		return finish("export", err, stderr)
	}
	e, err := export(ctx, env, &o)
	if err != nil {
		return finish("export", err, stderr)
	}
	if *out == "" {
		return finish("export", printJSON(stdout, e), stderr)
	}
	var b bytes.Buffer
	if err := printJSON(&b, e); err != nil {
		return finish("export", err, stderr)
	}
	if err := writeFileAtomic(*out, b.Bytes()); err != nil {
		return finish("export", err, stderr)
	}
	if !o.JSON {
		fmt.Fprintf(stdout, "exported %d shard(s) of stream %s to %s\n", len(e.Shards), e.Stream, *out)
	}
	return ExitOK
}

func export(ctx context.Context, env Env, o *Options) (*Export, error) {
	t, err := openTarget(ctx, env, o, false, false)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	stream, err := pickStream(ctx, t, o)
	if err != nil {
		return nil, err
	}
	v, err := t.View(ctx, stream)
	if err != nil {
		return nil, err
	}
	if len(v.Shards) == 0 {
		return nil, fmt.Errorf("%s holds no progress of stream %s", t, stream)
	}
	return exportOf(v, t.String(), env.Now()), nil
}

// writeFileAtomic writes b to name through a temporary file and a rename.
func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}

func importCmd(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flags("import", &o, stderr)
	create := fs.Bool("create-table", false, "create the table when it is missing (--table)")
	missing := fs.Bool("missing", false, "with --table, into a fleet that has started: write only the shard items the table lacks (deleted by hand), leave the others")
	err := parse(fs, args, 1)
	if err == nil && fs.NArg() != 1 {
		err = usagef("name the export FILE to import")
	}
	if err == nil && *missing && (o.Table == "" || *create) {
		err = usagef("--missing restores shard items into a fleet's table (--table), which exists")
	}
	if err == nil && o.Dir == "" && o.Table == "" {
		err = checkTarget(&o, false)
	}
	if err != nil {
		return finish("import", err, stderr)
	}
	file := fs.Arg(0)
	e, err := readExport(file)
	if err != nil {
		return finish("import", err, stderr)
	}
	if o.Stream != "" && o.Stream != e.Stream {
		return finish("import", fmt.Errorf("%s holds stream %s, not %s (positions belong to their stream)", file, e.Stream, o.Stream), stderr)
	}
	o.Stream = e.Stream
	if err := checkTarget(&o, false); err != nil {
		return finish("import", err, stderr)
	}
	shards, err := e.progress(file)
	if err != nil {
		return finish("import", err, stderr)
	}
	// A journal directory is made when missing; a table only when asked.
	t, err := openTarget(ctx, env, &o, true, o.Dir != "" || *create)
	if err != nil {
		return finish("import", err, stderr)
	}
	defer t.Close()
	var id kinesisload.StreamIdentity
	if e.Identity != nil {
		id = *e.Identity
	}
	if *missing {
		return restoreMissing(ctx, t, &o, e.Stream, file, id, shards, stdout, stderr)
	}
	if err := t.Import(ctx, e.Stream, id, shards); err != nil {
		return finish("import", err, stderr)
	}
	if o.JSON {
		return finish("import", printJSON(stdout, map[string]any{"target": t.String(), "stream": e.Stream, "shards": len(shards)}), stderr)
	}
	fmt.Fprintf(stdout, "imported %d shard(s) of stream %s from %s into %s\n", len(shards), e.Stream, file, t)
	return ExitOK
}

// restoreMissing is import --missing: the shard items of a started fleet
// that its table lacks are written again from the export.
func restoreMissing(ctx context.Context, t target, o *Options, stream, file string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress, stdout, stderr io.Writer) int {
	ft, ok := t.(*fleetTarget)
	if !ok {
		return finish("import", usagef("--missing restores shard items into a fleet's table (--table)"), stderr)
	}
	wrote, err := fleet.RestoreMissing(ctx, ft.table, stream, id, shards)
	if err != nil {
		return finish("import", err, stderr)
	}
	if o.JSON {
		return finish("import", printJSON(stdout, map[string]any{"target": t.String(), "stream": stream, "restored": wrote, "shards": len(shards)}), stderr)
	}
	if len(wrote) == 0 {
		fmt.Fprintf(stdout, "nothing to restore: %s has an item for each of the %d shard(s) of stream %s in %s\n", t, len(shards), stream, file)
		return ExitOK
	}
	fmt.Fprintf(stdout, "restored %d shard item(s) of stream %s from %s into %s: %s\n", len(wrote), stream, file, t, strings.Join(wrote, ", "))
	fmt.Fprintf(stdout, "records after their exported positions are delivered again; start the Loaders that stopped (MissingShardError)\n")
	return ExitOK
}
