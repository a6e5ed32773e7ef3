package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Health of a shard in status.
const (
	HealthOK        = "ok"        // read, or waiting for nothing
	HealthCompleted = "completed" // read to its end
	HealthWaiting   = "waiting"   // a parent is not completed yet
	HealthStopped   = "stopped"   // nothing reads it
	HealthStuck     = "stuck"     // records wait longer than --max-lag
	HealthUnknown   = "unknown"   // its lag could not be measured
)

// StatusReport is what status prints with --json.
type StatusReport struct {
	Source  string         `json:"source"`
	Streams []StreamStatus `json:"streams"`
	// Healthy is false when a shard is stuck or stopped, or its lag could
	// not be measured (exit status 3).
	Healthy  bool     `json:"healthy"`
	Problems []string `json:"problems,omitempty"`
}

// StreamStatus is one stream in a [StatusReport].
type StreamStatus struct {
	Stream   string                      `json:"stream"`
	Identity *kinesisload.StreamIdentity `json:"identity,omitempty"`
	// Running says a Loader holds the journal (a journal), or a host's
	// heartbeat moved (a fleet).
	Running bool `json:"running"`
	// ReadFromCopy says the journal was read from a copy (a Loader held
	// it).
	ReadFromCopy bool `json:"read_from_copy,omitempty"`
	// A fleet's generation, initialisation and T0.
	Generation  uint64     `json:"generation,omitempty"`
	Initialised *bool      `json:"initialised,omitempty"`
	StartTime   *time.Time `json:"start_time,omitempty"`
	// Archived counts generations archived by start-overs.
	Archived int           `json:"archived,omitempty"`
	Shards   []ShardStatus `json:"shards"`
	Hosts    []HostStatus  `json:"hosts,omitempty"`
}

// ShardStatus is one shard in a [StreamStatus].
type ShardStatus struct {
	Shard     string              `json:"shard"`
	State     string              `json:"state"`
	Owner     string              `json:"owner,omitempty"`
	Epoch     uint64              `json:"epoch,omitempty"`
	HandoffTo string              `json:"handoff_to,omitempty"`
	Position  string              `json:"position,omitempty"`
	Parents   []string            `json:"parents,omitempty"`
	Children  []string            `json:"children,omitempty"`
	Lag       *Lag                `json:"lag,omitempty"`
	Health    string              `json:"health"`
	Why       string              `json:"why,omitempty"`
	Rewind    *kinesisload.Rewind `json:"last_rewind,omitempty"`
}

// HostStatus is a fleet's host in a [StreamStatus].
type HostStatus struct {
	Host    string `json:"host"`
	Counter uint64 `json:"heartbeat"`
	// Alive says its heartbeat moved during status's wait; Left that it
	// left the stream.
	Alive  bool   `json:"alive"`
	Left   bool   `json:"left,omitempty"`
	Shards int    `json:"shards"`
	Note   string `json:"note,omitempty"`
}

func statusCmd(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flags("status", &o, stderr)
	noLag := fs.Bool("no-lag", false, "do not read Kinesis (no lag, no stuck shards)")
	maxLag := fs.Duration("max-lag", 10*time.Minute, "a shard whose oldest unread record waited longer than `D` is stuck")
	wait := fs.Duration("heartbeat-wait", 3*time.Second, "a fleet: how long to watch the hosts' heartbeats (`D`; 0: take every owner for alive)")
	err := parse(fs, args, 0)
	if err == nil {
		err = checkTarget(&o, false)
	}
	switch {
	case err != nil:
	case *wait < 0:
		err = usagef("--heartbeat-wait %v: want a duration from 0", *wait)
	case *maxLag < 0:
		err = usagef("--max-lag %v: want a duration from 0", *maxLag)
	}
	if err != nil {
		return finish("status", err, stderr)
	}
	rep, err := status(ctx, env, &o, *noLag, *maxLag, *wait)
	if err != nil {
		return finish("status", err, stderr)
	}
	if o.JSON {
		err = printJSON(stdout, rep)
	} else {
		err = printStatus(stdout, rep)
	}
	if err != nil {
		return finish("status", err, stderr)
	}
	if !rep.Healthy {
		return ExitUnhealthy
	}
	return ExitOK
}

// status builds the report.
func status(ctx context.Context, env Env, o *Options, noLag bool, maxLag, wait time.Duration) (*StatusReport, error) {
	t, err := openTarget(ctx, env, o, false, false)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	streams := []string{o.Stream}
	if o.Stream == "" {
		if streams, err = t.Streams(ctx); err != nil {
			return nil, err
		}
		if len(streams) == 0 {
			return nil, fmt.Errorf("%s holds no stream's progress", t)
		}
	}
	var kc scan.Client
	if !noLag {
		if kc, err = env.Kinesis(ctx, o); err != nil {
			return nil, err
		}
	}
	rep := &StatusReport{Source: t.String(), Healthy: true}
	for _, stream := range streams {
		v, err := t.View(ctx, stream)
		if err != nil {
			return nil, err
		}
		if _, journal := t.(*journalTarget); journal && len(v.Shards) == 0 {
			return nil, fmt.Errorf("%s holds no progress of stream %s", t, stream)
		}
		ss := StreamStatus{Stream: stream, Generation: v.Generation, Archived: v.Archived}
		if !v.Identity.IsZero() {
			id := v.Identity
			ss.Identity = &id
		}
		alive := map[string]bool{}
		switch jt := t.(type) {
		case *journalTarget:
			ss.Running, ss.ReadFromCopy = jt.running, jt.copied
		case *fleetTarget:
			initialised := v.Initialised
			ss.Initialised = &initialised
			if !v.StartTime.IsZero() {
				st := v.StartTime
				ss.StartTime = &st
			}
			if len(v.Shards) == 0 && !v.Initialised {
				return nil, fmt.Errorf("%s holds nothing for stream %s", t, stream)
			}
			later := v
			if wait > 0 {
				if err := env.Sleep(ctx, wait); err != nil {
					return nil, err
				}
				if later, err = t.View(ctx, stream); err != nil {
					return nil, err
				}
			}
			owned := map[string]int{}
			for _, sh := range later.Shards {
				owned[sh.Owner]++
			}
			for _, id := range slices.Sorted(maps.Keys(later.Hosts)) {
				h := later.Hosts[id]
				before, seen := v.Hosts[id]
				hs := HostStatus{Host: id, Counter: h.Counter, Left: h.Left, Shards: owned[id]}
				hs.Alive = !h.Left && (wait == 0 || seen && before.Counter != h.Counter)
				if strings.HasPrefix(id, "tidemark-rewind-") {
					hs.Note = "a rewind's announcement (collected by the hosts)"
				}
				alive[id] = hs.Alive
				ss.Running = ss.Running || hs.Alive
				ss.Hosts = append(ss.Hosts, hs)
			}
			// A shard counts as unread only when it was unowned (or
			// owned by a dead host) at both reads: a lease moving is
			// not a stop.
			for id, sh := range later.Shards {
				if before, ok := v.Shards[id]; ok && before.Owner != "" && alive[before.Owner] && sh.Owner == "" {
					sh.Owner = before.Owner
					later.Shards[id] = sh
				}
			}
			v = later
		}
		ss.Shards = shardStatuses(ctx, kc, v, ss.Running, alive, t, env.Now(), maxLag)
		for _, sh := range ss.Shards {
			if sh.Health == HealthStopped || sh.Health == HealthStuck || sh.Health == HealthUnknown {
				rep.Healthy = false
				rep.Problems = append(rep.Problems, fmt.Sprintf("stream %s shard %s is %s: %s", stream, sh.Shard, sh.Health, sh.Why))
			}
		}
		rep.Streams = append(rep.Streams, ss)
	}
	return rep, nil
}

// shardStatuses decides each shard's health and measures its lag (kc
// nil: not measured).
func shardStatuses(ctx context.Context, kc scan.Client, v streamView, running bool, alive map[string]bool, t target, now time.Time, maxLag time.Duration) []ShardStatus {
	_, isFleet := t.(*fleetTarget)
	children := map[string][]string{}
	for id, sh := range v.Shards {
		for _, p := range sh.Progress.Parents {
			children[p] = append(children[p], id)
		}
	}
	var out []ShardStatus
	for _, id := range slices.Sorted(maps.Keys(v.Shards)) {
		sh := v.Shards[id]
		p := sh.Progress
		st := ShardStatus{Shard: id, State: p.State.String(), Owner: sh.Owner, Epoch: sh.Epoch, HandoffTo: sh.HandoffTo,
			Parents: p.Parents, Children: slices.Sorted(slices.Values(children[id])), Rewind: sh.Rewind}
		if p.Position.Kind != 0 {
			st.Position = p.Position.String()
		}
		waiting := ""
		for _, par := range p.Parents {
			if ps, ok := v.Shards[par]; ok && ps.Progress.State != kinesisload.StateCompleted {
				waiting = par
			}
		}
		switch {
		case p.State == kinesisload.StateCompleted:
			st.Health = HealthCompleted
		case waiting != "":
			st.Health, st.Why = HealthWaiting, "parent "+waiting+" is not completed"
		case !isFleet && !running:
			st.Health, st.Why = HealthStopped, "no Loader holds the journal directory"
		case isFleet && (sh.Owner == "" || !alive[sh.Owner]):
			st.Health = HealthStopped
			if sh.Owner == "" {
				st.Why = "no host holds its lease"
			} else {
				st.Why = "its owner " + sh.Owner + " does not heartbeat"
			}
		default:
			st.Health = HealthOK
		}
		if kc != nil && p.State != kinesisload.StateCompleted && p.Position.Kind != 0 && p.Position.Kind != scan.KindShardEnd && p.Position.Kind != scan.KindLatest {
			lag := measureLag(ctx, kc, v.Stream, id, p.Position, now)
			st.Lag = &lag
			behind := time.Duration(lag.MillisBehindLatest) * time.Millisecond
			switch {
			case st.Health != HealthOK:
			case lag.Error != "":
				// A throttle (status shares the shard's reads with the
				// Loader), or worse: not "ok" unless it was seen.
				st.Health, st.Why = HealthUnknown, "its lag could not be measured: "+lag.Error
			case lag.OldestUnread != nil && time.Duration(lag.OldestUnreadAge)*time.Millisecond > maxLag:
				st.Health = HealthStuck
				st.Why = fmt.Sprintf("its oldest unread record waits for %s (more than --max-lag %s)",
					(time.Duration(lag.OldestUnreadAge) * time.Millisecond).Round(time.Second), maxLag)
			case lag.OldestUnread == nil && behind > maxLag:
				// Empty pages over a gap of the shard: no record read
				// yet, but Kinesis says how far behind its tip it is.
				st.Health = HealthStuck
				st.Why = fmt.Sprintf("it is %s behind its tip (more than --max-lag %s)", behind.Round(time.Second), maxLag)
			}
		}
		out = append(out, st)
	}
	return out
}

// printStatus prints the report for a person.
func printStatus(w io.Writer, rep *StatusReport) error {
	var b strings.Builder
	for i, ss := range rep.Streams {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Stream %s (%s)\n", ss.Stream, rep.Source)
		if ss.Identity != nil {
			fmt.Fprintf(&b, "  identity: %s\n", ss.Identity)
		}
		switch {
		case ss.Initialised != nil:
			init := "not committed yet"
			if *ss.Initialised {
				init = "committed"
			}
			fmt.Fprintf(&b, "  fleet: generation %d, initialisation %s", ss.Generation, init)
			if ss.StartTime != nil {
				fmt.Fprintf(&b, ", T0 %s", ss.StartTime.Format(time.RFC3339Nano))
			}
			b.WriteString("\n")
		case ss.ReadFromCopy:
			b.WriteString("  a Loader holds the journal: read from a copy\n")
		case !ss.Running:
			b.WriteString("  no Loader holds the journal\n")
		}
		if ss.Archived > 0 {
			fmt.Fprintf(&b, "  %d generation(s) archived by start-overs\n", ss.Archived)
		}
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SHARD\tSTATE\tOWNER\tEPOCH\tPOSITION\tBEHIND\tHEALTH")
		for _, sh := range ss.Shards {
			behind := "-"
			if sh.Lag != nil {
				behind = sh.Lag.String()
			}
			health := sh.Health
			if sh.Why != "" {
				health += ": " + sh.Why
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", sh.Shard, sh.State, orDash(sh.Owner), sh.Epoch, orDash(sh.Position), behind, health)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("  lineage:\n")
		writeTree(&b, ss.Shards, "    ")
		if len(ss.Hosts) > 0 {
			b.WriteString("  hosts:\n")
			for _, h := range ss.Hosts {
				state := "alive"
				switch {
				case h.Left:
					state = "left"
				case !h.Alive:
					state = "no heartbeat during the wait"
				}
				fmt.Fprintf(&b, "    %s: heartbeat %d, %s, %d shard(s)", h.Host, h.Counter, state, h.Shards)
				if h.Note != "" {
					b.WriteString(" (" + h.Note + ")")
				}
				b.WriteString("\n")
			}
		}
		for _, sh := range ss.Shards {
			if rw := sh.Rewind; rw != nil {
				fmt.Fprintf(&b, "  last rewind of %s: %s\n", sh.Shard, describeRewind(*rw))
			}
		}
	}
	if len(rep.Problems) > 0 {
		b.WriteString("\nPROBLEMS:\n")
		for _, p := range rep.Problems {
			b.WriteString("  " + p + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describeRewind says who moved a shard, when, from and to.
func describeRewind(rw kinesisload.Rewind) string {
	s := fmt.Sprintf("%s by %s at %s, from %s to %s", rw.ID, rw.By, rw.At.UTC().Format(time.RFC3339), orDash(positionString(rw.From)), rw.To)
	if rw.Reason != "" {
		s += " (" + rw.Reason + ")"
	}
	if rw.SinkPending {
		s += "; a TransactionalSink's checkpoint is not set back yet"
	}
	return s
}

func positionString(p scan.Position) string {
	if p.Kind == 0 {
		return ""
	}
	return p.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeTree prints the lineage: roots first, each child under its
// parents (a merge's child under each, marked).
func writeTree(b *strings.Builder, shards []ShardStatus, indent string) {
	byID := map[string]ShardStatus{}
	for _, sh := range shards {
		byID[sh.Shard] = sh
	}
	var walk func(id, prefix string, depth int)
	walk = func(id, prefix string, depth int) {
		sh := byID[id]
		line := fmt.Sprintf("%s%s%s %s", indent, prefix, id, sh.State)
		if len(sh.Parents) > 1 {
			line += " (merge of " + strings.Join(sh.Parents, " and ") + ")"
		}
		b.WriteString(line + "\n")
		if depth > 64 {
			return
		}
		for _, c := range sh.Children {
			walk(c, strings.Repeat("  ", depth)+"└─ ", depth+1)
		}
	}
	for _, sh := range shards {
		root := true
		for _, p := range sh.Parents {
			if _, ok := byID[p]; ok {
				root = false
			}
		}
		if root {
			walk(sh.Shard, "", 0)
		}
	}
}
