package kinesisload

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidemark/tidemark/scan"
)

// ShardState is where a shard is in its life as the Loader sees it. States
// only move forward, in the order of the constants.
type ShardState uint8

// The shard states.
const (
	// StateDiscovered: the shard is known (from ListShards) but its
	// place in the lineage is not decided yet.
	StateDiscovered ShardState = iota + 1
	// StatePendingParent: a parent is not COMPLETED yet; the shard is
	// not read.
	StatePendingParent
	// StateActive: every parent is COMPLETED; the shard is being read.
	StateActive
	// StateDraining: the shard is closed and its last record has been
	// read; the commit covering it is not durable yet.
	StateDraining
	// StateCompleted: the commit covering the shard's last record is
	// durable. Its children may be read.
	StateCompleted
)

var stateNames = [...]string{
	0:                  "NONE",
	StateDiscovered:    "DISCOVERED",
	StatePendingParent: "PENDING_PARENT",
	StateActive:        "ACTIVE",
	StateDraining:      "DRAINING",
	StateCompleted:     "COMPLETED",
}

// String returns the state's name, such as "ACTIVE", and "NONE" for the
// zero ShardState (no state yet: the From of a new shard's first
// [ShardStateChanged], or "no change" in an update).
func (s ShardState) String() string {
	if int(s) >= len(stateNames) {
		return fmt.Sprintf("ShardState(%d)", uint8(s))
	}
	return stateNames[s]
}

// MarshalText implements [encoding.TextMarshaler]: the name of
// [ShardState.String], "NONE" for the zero ShardState.
func (s ShardState) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("kinesisload: invalid shard state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]; it accepts what
// MarshalText gives, in any case.
func (s *ShardState) UnmarshalText(b []byte) error {
	for i := ShardState(0); i <= StateCompleted; i++ {
		if strings.EqualFold(string(b), stateNames[i]) {
			*s = i
			return nil
		}
	}
	return fmt.Errorf("kinesisload: unknown shard state %q", b)
}

// ShardProgress is the durable record of one shard: its lineage, its state
// and where reading resumes.
type ShardProgress struct {
	// ShardID names the shard.
	ShardID string
	// Parents are the shard's parents as ListShards reported them: none,
	// one after a split, two after a merge.
	Parents []string
	// State is the shard's state; zero means "no change" in an update.
	State ShardState
	// Position is where reading resumes: AFTER_SEQUENCE_NUMBER of the last
	// committed record, a start position, or SHARD_END once COMPLETED. The
	// zero Position means "no change" in an update.
	Position scan.Position
}

// progressJSON is the journal's encoding of a ShardProgress: a zero
// State or Position (no change) is left out.
type progressJSON struct {
	ShardID  string     `json:"id"`
	Parents  []string   `json:"parents,omitempty"`
	State    ShardState `json:"state,omitempty"`
	Position string     `json:"pos,omitempty"`
}

// MarshalJSON encodes p as the journal stores it.
func (p ShardProgress) MarshalJSON() ([]byte, error) {
	j := progressJSON{ShardID: p.ShardID, Parents: p.Parents, State: p.State}
	if p.Position.Kind != 0 {
		b, err := p.Position.MarshalText()
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", p.ShardID, err)
		}
		j.Position = string(b)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encoded.
func (p *ShardProgress) UnmarshalJSON(b []byte) error {
	var j progressJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	q := ShardProgress{ShardID: j.ShardID, Parents: j.Parents, State: j.State}
	if j.Position != "" {
		pos, err := scan.Parse(j.Position)
		if err != nil {
			return fmt.Errorf("shard %s: %w", j.ShardID, err)
		}
		q.Position = pos
	}
	*p = q
	return nil
}

// merge returns the progress after applying update u to the stored p. It
// never moves a shard back: states only advance, and a position is replaced
// only by one further along (see further). merge is commutative,
// associative and idempotent over updates of one shard, so replaying a
// journal in any order, any number of times, gives the same result.
func merge(p, u ShardProgress) ShardProgress {
	out := p
	out.ShardID = u.ShardID
	for _, id := range u.Parents {
		if !slices.Contains(out.Parents, id) {
			out.Parents = append(slices.Clip(out.Parents), id)
		}
	}
	slices.Sort(out.Parents)
	if u.State > out.State {
		out.State = u.State
	}
	if further(u.Position, out.Position) {
		out.Position = u.Position
	}
	return out
}

// further reports whether a is further along than b, so that a stored b
// may be replaced by a: an unset position is before LATEST, LATEST before
// every other position, and those are in the order of [scan.Compare] (a
// record position is further than a start; the Loader never saves two
// starts for one shard, the order only makes merge commutative).
func further(a, b scan.Position) bool {
	ra, rb := symbolicRank(a), symbolicRank(b)
	if ra != rb || ra < 2 {
		return ra > rb
	}
	c, err := scan.Compare(a, b)
	return err == nil && c > 0
}

// symbolicRank puts the positions scan.Compare refuses first: 0 for an
// unset position, 1 for LATEST, 2 for every other.
func symbolicRank(p scan.Position) int {
	switch p.Kind {
	case 0:
		return 0
	case scan.KindLatest:
		return 1
	}
	return 2
}

// CheckRestore reports whether p may be restored as a shard's stored
// progress (an import of an export, a migration): its position, when
// set, valid and concrete (LATEST is never stored), and SHARD_END and
// COMPLETED only together, as a shard read to its end stores them. An
// open shard stored at SHARD_END would be completed unread, its records
// skipped; a COMPLETED shard short of its end would let its children be
// read before the rest of it.
func CheckRestore(p ShardProgress) error {
	if p.Position.Kind != 0 {
		if err := p.Position.Validate(); err != nil {
			return err
		}
		if p.Position.Kind == scan.KindLatest {
			return errors.New("LATEST is never stored: resolve it to a concrete position first (a reader would resolve it again, later, and skip what arrived meanwhile)")
		}
	}
	switch end := p.Position.Kind == scan.KindShardEnd; {
	case p.Position.Kind == 0 && (p.State == StatePendingParent || p.State == StateActive || p.State == StateDraining):
		return fmt.Errorf("state %v with no position: an open shard is stored with where its reading resumes (a Loader would stop on it)", p.State)
	case end && p.State != StateCompleted:
		return fmt.Errorf("position SHARD_END with state %v: only a shard read to its end (COMPLETED) is stored at SHARD_END; its records would be skipped", p.State)
	case p.State == StateCompleted && !end:
		return fmt.Errorf("state COMPLETED at %v: a shard read to its end is stored at SHARD_END; its children would be read before the rest of it", p.Position)
	}
	return nil
}
