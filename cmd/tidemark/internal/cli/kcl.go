package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kpl"
	"github.com/tidemark/tidemark/scan"
)

// This file is import-kcl: the adoption of a KCL application's lease
// table (KCL 1.x, 2.x and 3.x, single- and multi-stream) or a
// vmware-go-kcl(-v2) application's checkpoint table, for one stream. The
// item formats (attribute names and meanings) are those of KCL's
// DynamoDBLeaseSerializer and DynamoDBMultiStreamLeaseSerializer (1.x:
// KinesisClientLeaseSerializer, the same names) and of vmware-go-kcl's
// dynamodb-checkpointer.go; see docs/operations.md, "Migrating from KCL".

// Lease table formats.
const (
	formatKCL         = "kcl"             // leaseKey = shard ID
	formatKCLMulti    = "kcl-multistream" // leaseKey = account:stream:epoch:shard
	formatVMware      = "vmware-go-kcl"   // ShardID
	kclSentinelLatest = "LATEST"
	kclSentinelTrim   = "TRIM_HORIZON"
	kclSentinelAtTime = "AT_TIMESTAMP"
	kclSentinelEnd    = "SHARD_END"
)

// kclLease is one lease of the stream imported.
type kclLease struct {
	Format string
	// Key is the item's key: leaseKey (KCL) or ShardID (vmware).
	Key   string
	Shard string
	// Checkpoint is a sequence number or a sentinel; "" when the item
	// has none (vmware-go-kcl: no checkpoint yet).
	Checkpoint  string
	SubSequence int64
	Parents     []string
	// Pending is KCL's prepared checkpoint (not committed).
	Pending string
	// Moves is what changes while a worker holds the lease (KCL's
	// leaseCounter, vmware's LeaseTimeout and owner): compared between
	// two reads to tell whether workers still run.
	Moves string
	// StreamEpoch is a multi-stream lease's stream creation epoch
	// (seconds); -1 otherwise.
	StreamEpoch int64
}

// multiStreamID matches KCL's serialised stream identifier,
// account:stream:creationEpoch.
var multiStreamID = regexp.MustCompile(`^([0-9]+):([^:]+):([0-9]+)$`)

// attr reads a string (S) or number (N) attribute of item; present is
// false when it is absent; an attribute of another type is an error
// naming it.
func attr(item map[string]ddbtypes.AttributeValue, name string) (v string, present bool, err error) {
	av, ok := item[name]
	if !ok {
		return "", false, nil
	}
	switch av := av.(type) {
	case *ddbtypes.AttributeValueMemberS:
		return av.Value, true, nil
	case *ddbtypes.AttributeValueMemberN:
		return av.Value, true, nil
	case *ddbtypes.AttributeValueMemberNULL:
		return "", false, nil
	}
	return "", true, fmt.Errorf("attribute %s is of type %T, want a string or a number", name, av)
}

// attrSet reads a string set (SS), or a list or a single string of shard
// IDs, as KCL's parentShardId and vmware's ParentShardId hold them.
func attrSet(item map[string]ddbtypes.AttributeValue, name string) ([]string, error) {
	av, ok := item[name]
	if !ok {
		return nil, nil
	}
	switch av := av.(type) {
	case *ddbtypes.AttributeValueMemberSS:
		return slices.Sorted(slices.Values(av.Value)), nil
	case *ddbtypes.AttributeValueMemberS:
		if av.Value == "" {
			return nil, nil
		}
		return []string{av.Value}, nil
	case *ddbtypes.AttributeValueMemberL:
		var out []string
		for i, e := range av.Value {
			s, ok := e.(*ddbtypes.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("attribute %s[%d] is of type %T, want a string", name, i, e)
			}
			out = append(out, s.Value)
		}
		slices.Sort(out)
		return out, nil
	case *ddbtypes.AttributeValueMemberNULL:
		return nil, nil
	}
	return nil, fmt.Errorf("attribute %s is of type %T, want a string set", name, av)
}

// parseLeases reads the lease table's items and keeps the leases of
// stream. Items of other streams, KCL 3.x's other entities and items that
// are no lease are counted in notes. A lease that cannot be read is an
// error naming its key and the attribute.
func parseLeases(items []map[string]ddbtypes.AttributeValue, stream string) ([]kclLease, []string, error) {
	var leases []kclLease
	others := map[string]int{}
	entities := map[string]int{}
	notLeases := 0
	for i, item := range items {
		key, isKCL, err := attr(item, "leaseKey")
		if err != nil {
			return nil, nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		vkey, isVMware, err := attr(item, "ShardID")
		if err != nil {
			return nil, nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		var l kclLease
		var perr error
		switch {
		case isKCL:
			et, _, err := attr(item, "entityType")
			if err != nil {
				return nil, nil, fmt.Errorf("lease %s: %w", key, err)
			}
			if et != "" && et != "LEASE" {
				entities[et]++
				continue
			}
			var of string
			l, of, perr = parseKCLLease(item, key)
			if perr == nil && of != "" && of != stream {
				others[of]++
				continue
			}
		case isVMware:
			l, perr = parseVMwareLease(item, vkey)
		default:
			notLeases++
			continue
		}
		if perr != nil {
			return nil, nil, perr
		}
		leases = append(leases, l)
	}
	var notes []string
	for _, s := range slices.Sorted(maps.Keys(others)) {
		notes = append(notes, fmt.Sprintf("%d lease(s) of stream %s (a multi-stream application) left out", others[s], s))
	}
	for _, e := range slices.Sorted(maps.Keys(entities)) {
		notes = append(notes, fmt.Sprintf("%d item(s) of KCL entity type %s (not leases) left out", entities[e], e))
	}
	if notLeases > 0 {
		notes = append(notes, fmt.Sprintf("%d item(s) with neither leaseKey (KCL) nor ShardID (vmware-go-kcl) left out", notLeases))
	}
	slices.SortFunc(leases, func(a, b kclLease) int { return strings.Compare(a.Shard, b.Shard) })
	for i := 1; i < len(leases); i++ {
		if leases[i].Shard == leases[i-1].Shard {
			return nil, nil, fmt.Errorf("shard %s has two leases (%s and %s)", leases[i].Shard, leases[i-1].Key, leases[i].Key)
		}
	}
	return leases, notes, nil
}

// parseKCLLease reads a KCL lease; of is its stream for a multi-stream
// lease ("" for a single-stream one).
func parseKCLLease(item map[string]ddbtypes.AttributeValue, key string) (l kclLease, of string, err error) {
	l = kclLease{Format: formatKCL, Key: key, Shard: key, StreamEpoch: -1}
	bad := func(err error) (kclLease, string, error) {
		return kclLease{}, "", fmt.Errorf("KCL lease %s: %w", key, err)
	}
	streamID, multi, err := attr(item, "streamName")
	if err != nil {
		return bad(err)
	}
	if !multi && strings.Count(key, ":") == 3 {
		streamID, multi = key[:strings.LastIndexByte(key, ':')], true
	}
	if multi {
		m := multiStreamID.FindStringSubmatch(streamID)
		if m == nil {
			return bad(fmt.Errorf("attribute streamName = %q: want account:stream:creationEpoch", streamID))
		}
		l.Format, of = formatKCLMulti, m[2]
		if l.StreamEpoch, err = strconv.ParseInt(m[3], 10, 64); err != nil {
			return bad(fmt.Errorf("attribute streamName = %q: creation epoch: %v", streamID, err))
		}
		shard, ok, err := attr(item, "shardId")
		switch {
		case err != nil:
			return bad(err)
		case ok && shard != "":
			l.Shard = shard
		default:
			l.Shard = key[strings.LastIndexByte(key, ':')+1:]
		}
	}
	cp, ok, err := attr(item, "checkpoint")
	switch {
	case err != nil:
		return bad(err)
	case !ok || cp == "":
		return bad(errors.New("attribute checkpoint is missing (every KCL lease has one: a sequence number or a sentinel)"))
	}
	l.Checkpoint = cp
	if sub, ok, err := attr(item, "checkpointSubSequenceNumber"); err != nil {
		return bad(err)
	} else if ok {
		if l.SubSequence, err = strconv.ParseInt(sub, 10, 64); err != nil || l.SubSequence < 0 {
			return bad(fmt.Errorf("attribute checkpointSubSequenceNumber = %q: want a number from 0", sub))
		}
	}
	if l.Parents, err = attrSet(item, "parentShardId"); err != nil {
		return bad(err)
	}
	if l.Pending, _, err = attr(item, "pendingCheckpoint"); err != nil {
		return bad(err)
	}
	counter, _, err := attr(item, "leaseCounter")
	if err != nil {
		return bad(err)
	}
	owner, _, err := attr(item, "leaseOwner")
	if err != nil {
		return bad(err)
	}
	l.Moves = counter + " " + owner
	if !scanSentinel(cp) {
		if err := scan.ValidateSequence(cp); err != nil {
			return bad(fmt.Errorf("attribute checkpoint = %q: neither a sequence number nor a KCL sentinel: %v", cp, err))
		}
	}
	return l, of, nil
}

// parseVMwareLease reads a vmware-go-kcl(-v2) checkpoint item.
func parseVMwareLease(item map[string]ddbtypes.AttributeValue, key string) (kclLease, error) {
	l := kclLease{Format: formatVMware, Key: key, Shard: key, StreamEpoch: -1}
	bad := func(err error) (kclLease, error) {
		return kclLease{}, fmt.Errorf("vmware-go-kcl lease %s: %w", key, err)
	}
	cp, _, err := attr(item, "Checkpoint")
	if err != nil {
		return bad(err)
	}
	l.Checkpoint = cp
	if cp != "" && cp != kclSentinelEnd {
		if err := scan.ValidateSequence(cp); err != nil {
			return bad(fmt.Errorf("attribute Checkpoint = %q: neither a sequence number nor SHARD_END: %v", cp, err))
		}
	}
	if l.Parents, err = attrSet(item, "ParentShardId"); err != nil {
		return bad(err)
	}
	timeout, _, err := attr(item, "LeaseTimeout")
	if err != nil {
		return bad(err)
	}
	owner, _, err := attr(item, "AssignedTo")
	if err != nil {
		return bad(err)
	}
	l.Moves = timeout + " " + owner
	return l, nil
}

func scanSentinel(cp string) bool {
	switch cp {
	case kclSentinelLatest, kclSentinelTrim, kclSentinelAtTime, kclSentinelEnd:
		return true
	}
	return false
}

// KCLPlan is what import-kcl prints with --json: the position each shard
// gets, and why.
type KCLPlan struct {
	LeaseTable string                      `json:"lease_table"`
	Stream     string                      `json:"stream"`
	Identity   kinesisload.StreamIdentity  `json:"identity"`
	Target     string                      `json:"target"`
	Formats    []string                    `json:"formats"`
	Applied    bool                        `json:"applied"`
	Shards     []KCLPlanShard              `json:"shards"`
	Skipped    map[string]string           `json:"skipped,omitempty"`
	Notes      []string                    `json:"notes,omitempty"`
	Warnings   []string                    `json:"warnings,omitempty"`
	Resolved   map[string]scan.Position    `json:"latest_resolved,omitempty"`
	ResolvedAt *time.Time                  `json:"latest_resolved_at,omitempty"`
	progress   []kinesisload.ShardProgress `json:"-"`
}

// KCLPlanShard is one shard of a [KCLPlan].
type KCLPlanShard struct {
	Shard       string   `json:"shard"`
	Lease       string   `json:"lease,omitempty"`
	Checkpoint  string   `json:"kcl_checkpoint,omitempty"`
	SubSequence int64    `json:"kcl_subsequence,omitempty"`
	State       string   `json:"state"`
	Position    string   `json:"position"`
	Parents     []string `json:"parents,omitempty"`
	Note        string   `json:"note,omitempty"`
}

type kclArgs struct {
	atTimestamp     time.Time
	initialPosition string
	apply, create   bool
}

func importKCLCmd(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flags("import-kcl", &o, stderr)
	fs.StringVar(&o.KCLTable, "kcl-table", "", "the KCL (or vmware-go-kcl) application's lease `TABLE`")
	fs.StringVar(&o.KCLEndpoint, "kcl-endpoint", "", "the lease table's DynamoDB `URL` (default --endpoint)")
	at := fs.String("at-timestamp", "", "the application's initial timestamp (`TIME`, RFC 3339): what KCL's AT_TIMESTAMP checkpoints mean (KCL stores the word, not the time)")
	initial := fs.String("initial-position", "", "vmware-go-kcl leases with no checkpoint start here (`POS`: TRIM_HORIZON, LATEST or AT_TIMESTAMP with --at-timestamp): the application's InitialPositionInStream")
	apply := fs.Bool("apply", false, "write the positions (default: a dry run that prints them)")
	create := fs.Bool("create-table", false, "create the table when it is missing (--table, with --apply)")
	err := parse(fs, args, 0)
	if err == nil {
		err = checkTarget(&o, true)
	}
	if err == nil && o.KCLTable == "" {
		err = usagef("--kcl-table is required")
	}
	a := kclArgs{apply: *apply, create: *create, initialPosition: strings.ToUpper(*initial)}
	if err == nil && *at != "" {
		if a.atTimestamp, err = time.Parse(time.RFC3339Nano, *at); err != nil {
			err = usagef("--at-timestamp %q: want an RFC 3339 time: %v", *at, err)
		} else if a.atTimestamp.After(env.Now()) {
			err = usagef("--at-timestamp %s is in the future: Kinesis refuses it, and records that arrive until then would be passed over (is its zone right?)", *at)
		}
	}
	switch a.initialPosition {
	case "", kclSentinelLatest, kclSentinelTrim, kclSentinelAtTime:
	default:
		if err == nil {
			err = usagef("--initial-position %q: want TRIM_HORIZON, LATEST or AT_TIMESTAMP", *initial)
		}
	}
	if err != nil {
		return finish("import-kcl", err, stderr)
	}
	plan, err := importKCL(ctx, env, &o, a)
	if plan != nil {
		if o.JSON {
			if perr := printJSON(stdout, plan); perr != nil && err == nil {
				err = perr
			}
		} else {
			printKCLPlan(stdout, plan)
		}
	}
	return finish("import-kcl", err, stderr)
}

// importKCL reads the lease table and Kinesis, plans every shard's
// position and, with apply, imports them. The plan comes back with an
// error that stopped only the write.
func importKCL(ctx context.Context, env Env, o *Options, a kclArgs) (*KCLPlan, error) {
	items, err := env.KCLItems(ctx, o)
	if err != nil {
		return nil, err
	}
	leases, notes, err := parseLeases(items, o.Stream)
	if err != nil {
		return nil, fmt.Errorf("lease table %s: %w", o.KCLTable, err)
	}
	if len(leases) == 0 {
		return nil, fmt.Errorf("lease table %s holds no lease of stream %s (%d items; %s)", o.KCLTable, o.Stream, len(items), strings.Join(notes, "; "))
	}
	kc, err := env.Kinesis(ctx, o)
	if err != nil {
		return nil, err
	}
	id, err := streamIdentity(ctx, kc, o.Stream)
	if err != nil {
		return nil, err
	}
	listed, err := listShards(ctx, kc, o.Stream)
	if err != nil {
		return nil, err
	}
	plan := &KCLPlan{LeaseTable: o.KCLTable, Stream: o.Stream, Identity: id, Target: targetName(o), Notes: notes, Skipped: map[string]string{}}
	if err := planKCL(ctx, kc, plan, leases, listed, a); err != nil {
		return nil, err
	}
	if !a.apply {
		return plan, nil
	}
	// Workers still running would go on checkpointing (and reading)
	// after the import: every lease must stand still.
	again, err := env.KCLItems(ctx, o)
	if err != nil {
		return plan, err
	}
	later, _, err := parseLeases(again, o.Stream)
	if err != nil {
		return plan, err
	}
	if moved := movedLeases(leases, later); len(moved) > 0 {
		return plan, fmt.Errorf("nothing written: lease(s) %s changed while the import read them: KCL workers still run; stop every worker of the application first", strings.Join(moved, ", "))
	}
	t, err := openTarget(ctx, env, o, true, o.Dir != "" || a.create)
	if err != nil {
		return plan, err
	}
	defer t.Close()
	if err := t.Import(ctx, o.Stream, id, plan.progress); err != nil {
		return plan, err
	}
	plan.Applied = true
	return plan, nil
}

func targetName(o *Options) string {
	if o.Table != "" {
		return "table " + o.Table
	}
	return "journal " + o.Dir
}

// movedLeases names the leases whose counter, owner or checkpoint changed
// between two reads.
func movedLeases(before, after []kclLease) []string {
	was := map[string]kclLease{}
	for _, l := range before {
		was[l.Key] = l
	}
	var moved []string
	for _, l := range after {
		if b, ok := was[l.Key]; ok && (b.Moves != l.Moves || b.Checkpoint != l.Checkpoint || b.SubSequence != l.SubSequence) {
			moved = append(moved, l.Key)
		}
	}
	return moved
}

// planKCL decides every shard's progress (see docs/operations.md).
func planKCL(ctx context.Context, kc scan.Client, plan *KCLPlan, leases []kclLease, listed []types.Shard, a kclArgs) error {
	formats := map[string]bool{}
	shards := map[string]types.Shard{}
	for _, sh := range listed {
		shards[*sh.ShardId] = sh
	}
	listedParents := func(sh types.Shard) []string {
		var ps []string
		for _, p := range []*string{sh.ParentShardId, sh.AdjacentParentShardId} {
			if p != nil && *p != "" {
				ps = append(ps, *p)
			}
		}
		slices.Sort(ps)
		return ps
	}
	type entry struct {
		row KCLPlanShard
		p   kinesisload.ShardProgress
	}
	entries := map[string]*entry{}
	var latest, atTime, noCheckpoint []string
	var mismatched, openEnded []string
	for _, l := range leases {
		formats[l.Format] = true
		if l.StreamEpoch >= 0 && l.StreamEpoch != plan.Identity.Created.Unix() {
			mismatched = append(mismatched, fmt.Sprintf("%s (stream created at epoch %d)", l.Key, l.StreamEpoch))
			continue
		}
		e := &entry{row: KCLPlanShard{Shard: l.Shard, Lease: l.Key, Checkpoint: l.Checkpoint, SubSequence: l.SubSequence},
			p: kinesisload.ShardProgress{ShardID: l.Shard, Parents: l.Parents}}
		sh, isListed := shards[l.Shard]
		if isListed {
			lp := listedParents(sh)
			if len(l.Parents) > 0 && !slices.Equal(lp, l.Parents) {
				e.row.Note = fmt.Sprintf("the lease names parents %v, Kinesis %v: Kinesis's kept", l.Parents, lp)
			}
			e.p.Parents = lp
		}
		switch {
		case l.Checkpoint == kclSentinelEnd:
			e.p.State, e.p.Position = kinesisload.StateCompleted, scan.ShardEnd()
			if !isListed {
				e.row.Note = "completed; Kinesis no longer lists it"
			} else if sh.SequenceNumberRange == nil || sh.SequenceNumberRange.EndingSequenceNumber == nil {
				openEnded = append(openEnded, fmt.Sprintf("%s (lease %s)", l.Shard, l.Key))
			}
		case !isListed:
			plan.Skipped[l.Shard] = fmt.Sprintf("lease %s checkpointed at %s, but Kinesis no longer lists the shard: its records expired before they were all read; nothing to import", l.Key, l.Checkpoint)
			continue
		case l.Checkpoint == kclSentinelTrim:
			e.p.Position = scan.TrimHorizon()
			e.row.Note = "KCL's TRIM_HORIZON: from the oldest record retained"
		case l.Checkpoint == kclSentinelAtTime:
			atTime = append(atTime, l.Shard)
			e.p.Position = scan.AtTimestamp(a.atTimestamp)
			e.row.Note = "KCL's AT_TIMESTAMP: the application's initial timestamp (--at-timestamp)"
		case l.Checkpoint == kclSentinelLatest:
			latest = append(latest, l.Shard)
		case l.Checkpoint == "":
			noCheckpoint = append(noCheckpoint, l.Shard)
			switch a.initialPosition {
			case kclSentinelTrim:
				e.p.Position = scan.TrimHorizon()
				e.row.Note = "no checkpoint: --initial-position TRIM_HORIZON"
			case kclSentinelAtTime:
				atTime = append(atTime, l.Shard)
				e.p.Position = scan.AtTimestamp(a.atTimestamp)
				e.row.Note = "no checkpoint: --initial-position AT_TIMESTAMP"
			case kclSentinelLatest:
				latest = append(latest, l.Shard)
			}
		case l.Format == formatVMware:
			// vmware-go-kcl resumes AFTER_SEQUENCE_NUMBER of its
			// checkpoint: whole records.
			e.p.Position = scan.AfterSequence(l.Checkpoint)
		default:
			pos, note, err := kclSequence(ctx, kc, plan.Stream, l)
			if err != nil {
				return err
			}
			e.p.Position, e.row.Note = pos, joinNotes(e.row.Note, note)
			if pos.Kind == scan.KindAtSequence {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("shard %s: %s", l.Shard, note))
			}
		}
		if l.Pending != "" {
			e.row.Note = joinNotes(e.row.Note, "a pending (prepared, not committed) checkpoint "+l.Pending+" is ignored: its records are delivered again")
		}
		entries[l.Shard] = e
	}
	if len(mismatched) > 0 {
		return fmt.Errorf("the multi-stream lease(s) %s are of an earlier stream of the name: stream %s is %s (created at epoch %d); import refused",
			strings.Join(mismatched, ", "), plan.Stream, plan.Identity, plan.Identity.Created.Unix())
	}
	if len(openEnded) > 0 {
		slices.Sort(openEnded)
		return fmt.Errorf("shard(s) %s are checkpointed at SHARD_END, but Kinesis lists them open: the leases are not of this stream (one of an earlier stream of the name?) or were edited; stored COMPLETED, their records would never be read; import refused",
			strings.Join(openEnded, ", "))
	}
	if len(noCheckpoint) > 0 && a.initialPosition == "" {
		return fmt.Errorf("vmware-go-kcl lease(s) of shard(s) %s have no checkpoint: they start at the application's InitialPositionInStream, which the table does not hold: give --initial-position (TRIM_HORIZON, LATEST, or AT_TIMESTAMP with --at-timestamp)", strings.Join(noCheckpoint, ", "))
	}
	if len(atTime) > 0 && a.atTimestamp.IsZero() {
		return fmt.Errorf("shard(s) %s are at AT_TIMESTAMP: KCL stores the word, not the time: give the application's initial timestamp with --at-timestamp", strings.Join(atTime, ", "))
	}
	for f := range formats {
		plan.Formats = append(plan.Formats, f)
	}
	slices.Sort(plan.Formats)

	// Shards Kinesis lists that have no lease.
	hasLeasedDescendant := func(id string) bool {
		seen := map[string]bool{}
		var walk func(string) bool
		walk = func(p string) bool {
			for _, sh := range listed {
				c := *sh.ShardId
				if seen[c] || !slices.Contains(listedParents(sh), p) {
					continue
				}
				seen[c] = true
				if _, ok := entries[c]; ok || walk(c) {
					return true
				}
			}
			return false
		}
		return walk(id)
	}
	for _, sh := range listed {
		id := *sh.ShardId
		if _, ok := entries[id]; ok {
			continue
		}
		if _, skipped := plan.Skipped[id]; skipped {
			continue
		}
		e := &entry{row: KCLPlanShard{Shard: id}, p: kinesisload.ShardProgress{ShardID: id, Parents: listedParents(sh)}}
		closed := sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil
		if closed && hasLeasedDescendant(id) {
			e.p.State, e.p.Position = kinesisload.StateCompleted, scan.ShardEnd()
			e.row.Note = "no lease, and a descendant has one: KCL completed it and deleted its lease"
		} else {
			e.p.Position = scan.TrimHorizon()
			e.row.Note = "no lease (KCL had not created it yet): read from TRIM_HORIZON once its parents are completed"
		}
		entries[id] = e
	}

	// LATEST cannot be recovered: resolve it now, loudly.
	if len(latest) > 0 {
		slices.Sort(latest)
		got, at, err := resolveNow(ctx, kc, plan.Stream, latest)
		if err != nil {
			return err
		}
		plan.Resolved, plan.ResolvedAt = got, &at
		for _, id := range latest {
			e := entries[id]
			e.p.Position = got[id]
			e.row.Note = joinNotes(e.row.Note, "LATEST resolved at import time")
		}
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("shard(s) %s were at LATEST (KCL never stored where that was): resolved now, to just after each shard's last record before %s on Kinesis's clock; records that arrived before then and that the KCL application had not processed are not delivered (the gap KCL itself has)",
			strings.Join(latest, ", "), at.Format(time.RFC3339Nano)))
	}

	// States: COMPLETED as decided; otherwise ACTIVE once every parent
	// is COMPLETED (or unknown to both), else PENDING_PARENT.
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		e := entries[id]
		if e.p.State != kinesisload.StateCompleted {
			e.p.State = kinesisload.StateActive
			for _, par := range e.p.Parents {
				if pe, ok := entries[par]; ok && pe.p.State != kinesisload.StateCompleted {
					e.p.State = kinesisload.StatePendingParent
				}
			}
		}
		e.row.State, e.row.Position, e.row.Parents = e.p.State.String(), e.p.Position.String(), e.p.Parents
		plan.Shards = append(plan.Shards, e.row)
		plan.progress = append(plan.progress, e.p)
	}
	return nil
}

// kclSequence turns a KCL checkpoint at a sequence number into a
// position. KCL's checkpoint (seq, sub) means every user record up to
// and including sub-record sub of record seq was processed. tidemark
// resumes after whole Kinesis records, so the record is read: when sub
// is its last user record (or it is not aggregated) the shard resumes
// AFTER_SEQUENCE_NUMBER seq, exactly; when the checkpoint is inside a KPL
// aggregate, AT_SEQUENCE_NUMBER seq: the aggregate's first sub+1 user
// records are delivered again (tidemark never splits an aggregate). A
// record no longer retained resumes after seq.
func kclSequence(ctx context.Context, kc scan.Client, stream string, l kclLease) (scan.Position, string, error) {
	after := scan.AfterSequence(l.Checkpoint)
	rec, err := firstRecordAt(ctx, kc, stream, l.Shard, scan.AtSequence(l.Checkpoint))
	if err != nil {
		return scan.Position{}, "", fmt.Errorf("lease %s: reading its checkpoint's record: %w", l.Key, err)
	}
	if rec == nil || rec.SequenceNumber == nil || *rec.SequenceNumber != l.Checkpoint {
		return after, "the checkpoint's record is no longer retained", nil
	}
	users, err := kpl.Deaggregate(rec.Data)
	switch {
	case errors.Is(err, kpl.ErrNotAggregated), errors.Is(err, kpl.ErrCorrupt):
		if l.SubSequence > 0 {
			return after, fmt.Sprintf("sub-sequence %d of a record that is not a KPL aggregate: resumed after the record", l.SubSequence), nil
		}
		return after, "", nil
	case err != nil:
		return scan.Position{}, "", fmt.Errorf("lease %s: %w", l.Key, err)
	case l.SubSequence >= int64(len(users))-1:
		return after, fmt.Sprintf("after the last of the aggregate's %d user records", len(users)), nil
	}
	return scan.AtSequence(l.Checkpoint), fmt.Sprintf("checkpoint inside a KPL aggregate (user record %d of %d): resumed AT the aggregate, whose first %d user records are delivered again",
		l.SubSequence, len(users), l.SubSequence+1), nil
}

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

func printKCLPlan(w io.Writer, plan *KCLPlan) {
	var b strings.Builder
	fmt.Fprintf(&b, "Lease table %s (%s), stream %s (%s) -> %s\n", plan.LeaseTable, strings.Join(plan.Formats, ", "), plan.Stream, plan.Identity, plan.Target)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SHARD\tKCL CHECKPOINT\tSTATE\tPOSITION\tPARENTS\tNOTE")
	for _, sh := range plan.Shards {
		cp := sh.Checkpoint
		if sh.SubSequence > 0 {
			cp += fmt.Sprintf(" (sub %d)", sh.SubSequence)
		}
		if sh.Lease == "" {
			cp = "(no lease)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", sh.Shard, orDash(cp), sh.State, sh.Position, orDash(strings.Join(sh.Parents, " ")), sh.Note)
	}
	_ = tw.Flush()
	for _, id := range slices.Sorted(maps.Keys(plan.Skipped)) {
		fmt.Fprintf(&b, "  not imported: %s: %s\n", id, plan.Skipped[id])
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, wmsg := range plan.Warnings {
		fmt.Fprintf(&b, "  WARNING: %s\n", wmsg)
	}
	if plan.Applied {
		fmt.Fprintf(&b, "Imported %d shard(s) into %s. Keep the KCL workers stopped; start the Loaders.\n", len(plan.progress), plan.Target)
	} else {
		b.WriteString("Dry run: nothing written. Run again with --apply to import.\n")
	}
	_, _ = io.WriteString(w, b.String())
}
