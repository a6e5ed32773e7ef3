package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// RewindReport is what rewind prints with --json.
type RewindReport struct {
	Target string `json:"target"`
	Stream string `json:"stream"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Rewound are the shards moved (or, in a dry run, to move).
	Rewound []kinesisload.Rewind `json:"rewound"`
	// Skipped are shards left alone, with why.
	Skipped map[string]string `json:"skipped,omitempty"`
	// ResolvedAt is Kinesis's time "now" was resolved at.
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Warnings   []string   `json:"warnings,omitempty"`
}

func rewindCmd(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flags("rewind", &o, stderr)
	to := fs.String("to", "", "where to: an RFC 3339 `TIME`, TRIM_HORIZON, now (each shard's tip now, resolved), or a position (AT_SEQUENCE_NUMBER:N, AFTER_SEQUENCE_NUMBER:N) of one shard")
	from := fs.String("from", "", "move each shard to its position in this export `FILE` (tidemark export)")
	shards := fs.String("shards", "", "only these shards (`A,B,...`); default every shard not COMPLETED")
	by := fs.String("by", "", "who makes the rewind, recorded with it (default user@host)")
	reason := fs.String("reason", "", "a note recorded with the rewind")
	dry := fs.Bool("dry-run", false, "print what would move, write nothing")
	forward := fs.Bool("forward", false, "with --to TIME or a sequence number, move shards forward past records not read yet, which are then never read (refused without it)")
	err := parse(fs, args, 0)
	if err == nil {
		err = checkTarget(&o, true)
	}
	if err == nil && (*to == "") == (*from == "") {
		err = usagef("give --to WHERE or --from FILE (one of them)")
	}
	if err != nil {
		return finish("rewind", err, stderr)
	}
	who := *by
	if who == "" {
		who = env.Who()
	}
	rep, err := rewind(ctx, env, &o, rewindArgs{to: *to, from: *from, shards: splitList(*shards), by: who, reason: *reason, dry: *dry, forward: *forward})
	if rep != nil {
		if o.JSON {
			if perr := printJSON(stdout, rep); perr != nil && err == nil {
				err = perr
			}
		} else {
			printRewind(stdout, rep)
		}
	}
	return finish("rewind", err, stderr)
}

type rewindArgs struct {
	to, from     string
	shards       []string
	by, reason   string
	dry, forward bool
}

// rewind moves the positions; a report of what it did comes back even
// with an error that stopped it part-way (a fleet).
func rewind(ctx context.Context, env Env, o *Options, a rewindArgs) (*RewindReport, error) {
	var file *Export
	if a.from != "" {
		var err error
		if file, err = readExport(a.from); err != nil {
			return nil, err
		}
		if file.Stream != o.Stream {
			return nil, fmt.Errorf("%s holds stream %s, not %s", a.from, file.Stream, o.Stream)
		}
	}
	var where scan.Position
	now := false
	if a.to != "" {
		var err error
		if where, now, err = parseWhere(a.to, env.Now()); err != nil {
			return nil, usageError{err.Error()}
		}
		if where.Kind == scan.KindAtSequence || where.Kind == scan.KindAfterSequence {
			if len(a.shards) != 1 {
				return nil, usagef("a sequence number belongs to one shard: name it with --shards")
			}
		}
	}
	t, err := openTarget(ctx, env, o, !a.dry, false)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	v, err := t.View(ctx, o.Stream)
	if err != nil {
		return nil, err
	}
	if len(v.Shards) == 0 {
		return nil, fmt.Errorf("%s holds no progress of stream %s", t, o.Stream)
	}
	if file != nil && file.Identity != nil && !v.Identity.IsZero() && !file.Identity.Equal(v.Identity) {
		return nil, fmt.Errorf("%s holds stream %s as %s, the file %s as %s: refusing positions of another stream", t, o.Stream, v.Identity, a.from, file.Identity)
	}
	rep := &RewindReport{Target: t.String(), Stream: o.Stream, DryRun: a.dry, Skipped: map[string]string{}}

	// Which shards.
	var ids []string
	if len(a.shards) > 0 {
		for _, id := range a.shards {
			if _, ok := v.Shards[id]; !ok {
				return nil, fmt.Errorf("%s: stream %s has no shard %s (see tidemark status)", t, o.Stream, id)
			}
		}
		ids = a.shards
	} else {
		for _, id := range slices.Sorted(maps.Keys(v.Shards)) {
			if v.Shards[id].Progress.State == kinesisload.StateCompleted {
				rep.Skipped[id] = "COMPLETED: a rewind never reopens a completed shard (its children may have been read); replay it with Config.StopAt under another journal or table"
				continue
			}
			ids = append(ids, id)
		}
	}

	// Where to.
	target := map[string]scan.Position{}
	switch {
	case file != nil:
		inFile := map[string]ExportShard{}
		for _, sh := range file.Shards {
			inFile[sh.Shard] = sh
		}
		for _, id := range ids {
			sh, ok := inFile[id]
			switch {
			case !ok:
				rep.Skipped[id] = "not in " + a.from
			case sh.Position == "":
				rep.Skipped[id] = "no position in " + a.from
			default:
				pos, err := scan.Parse(sh.Position)
				if err != nil {
					return nil, fmt.Errorf("%s: shard %s: position %q: %w", a.from, id, sh.Position, err)
				}
				if pos.Kind == scan.KindShardEnd {
					rep.Skipped[id] = "SHARD_END in " + a.from + " (a shard is completed by reading it)"
					continue
				}
				target[id] = pos
			}
		}
	case now:
		kc, err := env.Kinesis(ctx, o)
		if err != nil {
			return nil, err
		}
		got, at, err := resolveNow(ctx, kc, o.Stream, ids)
		if err != nil {
			return nil, err
		}
		rep.ResolvedAt = &at
		target = got
	default:
		if where.Kind == scan.KindAtSequence || where.Kind == scan.KindAfterSequence {
			kc, err := env.Kinesis(ctx, o)
			if err != nil {
				return nil, err
			}
			if err := checkSequence(ctx, kc, o.Stream, ids[0], where); err != nil {
				return nil, err
			}
			warnings, err := checkSequenceNotForward(ctx, kc, o.Stream, ids[0], v.Shards[ids[0]].Progress.Position, where, a.forward)
			if err != nil {
				return nil, err
			}
			rep.Warnings = append(rep.Warnings, warnings...)
		}
		for _, id := range ids {
			target[id] = where
		}
		if where.Kind == scan.KindAtTimestamp {
			warnings, err := checkNotForward(ctx, env, o, v, ids, where.Timestamp, a.forward)
			if err != nil {
				return nil, err
			}
			rep.Warnings = append(rep.Warnings, warnings...)
		}
	}
	if len(target) == 0 {
		return rep, errors.New("no shard to rewind")
	}
	r := kinesisload.Rewind{ID: newRewindID(env.Now()), By: a.by, At: env.Now().UTC(), Reason: a.reason}
	if a.dry {
		plan, err := kinesisload.PlanRewind(v.progress(), r, target)
		if err != nil {
			return nil, err
		}
		rep.Rewound = plan
		return rep, nil
	}
	done, err := t.Rewind(ctx, o.Stream, r, target)
	rep.Rewound = done
	if errors.Is(err, fleet.ErrNotAnnounced) {
		rep.Warnings = append(rep.Warnings, err.Error())
		err = nil
	}
	if err != nil && len(done) > 0 {
		err = fmt.Errorf("stopped part-way (the shards listed were rewound): %w", err)
	}
	if err != nil && len(done) == 0 {
		return nil, err
	}
	return rep, err
}

// checkNotForward refuses a rewind of ids to time at when it would move a
// shard forward past records not read yet, which would never be read (a
// shard behind, stuck on a failing Sink, or a child still waiting at
// TRIM_HORIZON): the shard's oldest record after its stored position
// arrived before at. With forward it says so in warnings instead.
func checkNotForward(ctx context.Context, env Env, o *Options, v streamView, ids []string, at time.Time, forward bool) ([]string, error) {
	kc, err := env.Kinesis(ctx, o)
	if err != nil {
		return nil, err
	}
	var passed, warnings []string
	for _, id := range ids {
		p := v.Shards[id].Progress.Position
		if p.Kind == 0 || p.Kind == scan.KindLatest || p.Kind == scan.KindShardEnd {
			continue
		}
		lag := measureLag(ctx, kc, o.Stream, id, p, env.Now())
		switch {
		case lag.Error != "":
			warnings = append(warnings, fmt.Sprintf("shard %s: could not tell whether records after its position %v, not read yet, arrived before %s, which the rewind would pass over: %s",
				id, p, at.Format(time.RFC3339Nano), lag.Error))
		case lag.OldestUnread != nil && lag.OldestUnread.Before(at):
			passed = append(passed, fmt.Sprintf("%s (at %v; its oldest record not read yet arrived at %s)", id, p, lag.OldestUnread.Format(time.RFC3339Nano)))
		case lag.OldestUnread == nil && !lag.Ended && lag.MillisBehindLatest > 0 &&
			env.Now().Add(-time.Duration(lag.MillisBehindLatest)*time.Millisecond).Before(at):
			// Empty pages over a gap of the shard: no record seen, but
			// Kinesis says the position is older than the time.
			passed = append(passed, fmt.Sprintf("%s (at %v; no record read after it, but Kinesis says it is %s behind its tip: records not read yet may have arrived before the time)",
				id, p, (time.Duration(lag.MillisBehindLatest)*time.Millisecond).Round(time.Second)))
		}
	}
	if len(passed) == 0 {
		return warnings, nil
	}
	msg := fmt.Sprintf("--to %s moves shard(s) %s forward, past records not read yet, which would never be read",
		at.Format(time.RFC3339Nano), strings.Join(passed, ", "))
	if forward {
		return append(warnings, msg+" (--forward)"), nil
	}
	return nil, errors.New(msg + ": rewind them to an earlier time, leave them out with --shards, or give --forward to skip those records on purpose")
}

// checkSequenceNotForward refuses a rewind of shard from its stored
// position to the sequence position to when records not read yet (the
// first after from) come before to: they would never be read. With
// forward it says so in warnings instead.
func checkSequenceNotForward(ctx context.Context, kc scan.Client, stream, shard string, from, to scan.Position, forward bool) ([]string, error) {
	if from.Kind == 0 || from.Kind == scan.KindLatest || from.Kind == scan.KindShardEnd {
		return nil, nil
	}
	rec, err := firstRecordAt(ctx, kc, stream, shard, from)
	if err != nil {
		return []string{fmt.Sprintf("shard %s: could not tell whether records after its position %v, not read yet, come before %v, which the rewind would pass over: %v", shard, from, to, err)}, nil
	}
	if rec == nil || rec.SequenceNumber == nil {
		return nil, nil
	}
	c := scan.CompareSequence(*rec.SequenceNumber, to.Sequence)
	if c > 0 || (c == 0 && to.Kind == scan.KindAtSequence) {
		return nil, nil
	}
	msg := fmt.Sprintf("--to %v moves shard %s forward from %v, past records not read yet (the first: %s), which would never be read", to, shard, from, *rec.SequenceNumber)
	if forward {
		return []string{msg + " (--forward)"}, nil
	}
	return nil, errors.New(msg + ": give --forward to skip those records on purpose")
}

// parseWhere reads --to: a time, TRIM_HORIZON, now, or a position.
func parseWhere(s string, now time.Time) (pos scan.Position, isNow bool, err error) {
	switch strings.ToLower(s) {
	case "now":
		return scan.Position{}, true, nil
	case "latest", "-1":
		return pos, false, errors.New("--to LATEST is never stored (a later reader would resolve it again, later): use --to now, which resolves each shard's tip at once")
	}
	if t, terr := time.Parse(time.RFC3339Nano, s); terr == nil {
		if t.After(now) {
			return pos, false, fmt.Errorf("--to %s is in the future: Kinesis refuses it, and nothing has arrived then yet (use --to now)", s)
		}
		return scan.AtTimestamp(t), false, nil
	}
	pos, err = scan.Parse(s)
	if err != nil {
		return pos, false, fmt.Errorf("--to %q: want an RFC 3339 time, TRIM_HORIZON, now or a position: %v", s, err)
	}
	if err := kinesisload.CheckRewindPosition(pos); err != nil {
		return pos, false, fmt.Errorf("--to %s: %v", s, err)
	}
	if pos.Kind == scan.KindAtTimestamp && pos.Timestamp.After(now) {
		return pos, false, fmt.Errorf("--to %s is in the future", s)
	}
	return pos, false, nil
}

// newRewindID names a rewind: its time and a random suffix.
func newRewindID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

func printRewind(w io.Writer, rep *RewindReport) {
	var b strings.Builder
	verb := "rewound"
	if rep.DryRun {
		verb = "would rewind (dry run: nothing written)"
	}
	fmt.Fprintf(&b, "Stream %s (%s): %s %d shard(s)", rep.Stream, rep.Target, verb, len(rep.Rewound))
	if len(rep.Rewound) > 0 {
		rw := rep.Rewound[0]
		fmt.Fprintf(&b, " as rewind %s by %s at %s", rw.ID, rw.By, rw.At.Format(time.RFC3339))
	}
	b.WriteString("\n")
	if rep.ResolvedAt != nil {
		fmt.Fprintf(&b, "  now = %s on Kinesis's clock: each shard resumes after its last record before it\n", rep.ResolvedAt.Format(time.RFC3339Nano))
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SHARD\tFROM\tTO")
	for _, rw := range rep.Rewound {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", rw.Shard, orDash(positionString(rw.From)), rw.To)
	}
	_ = tw.Flush()
	for _, id := range slices.Sorted(maps.Keys(rep.Skipped)) {
		fmt.Fprintf(&b, "  %s left alone: %s\n", id, rep.Skipped[id])
	}
	if !rep.DryRun && len(rep.Rewound) > 0 {
		if strings.HasPrefix(rep.Target, "table ") {
			b.WriteString("  The hosts that read these shards lose them at their next round; the next owner resumes at the new position.\n")
		}
		b.WriteString("  A TransactionalSink's checkpoints are set back by the Loader before it reads a rewound shard\n" +
			"  (kinesisload.Rewinder), or the Loader stops naming the checkpoints to reset: see docs/operations.md.\n")
	}
	for _, wmsg := range rep.Warnings {
		fmt.Fprintf(&b, "  warning: %s\n", wmsg)
	}
	_, _ = io.WriteString(w, b.String())
}
