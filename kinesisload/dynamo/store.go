package dynamo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/kinesisload"
)

// Initialise implements [kinesisload.Membership]. The lock is a
// conditional write of the init item (a fresh token, on condition that the
// item is at the version read and nothing is committed); a lock held by a
// host that is alive in this host's view is waited for. The batch is
// written as pending positions under the token; the commit names the
// token, on condition that the lock is still ours.
func (m *member) Initialise(ctx context.Context, init kinesisload.InitFunc) error {
	c, me := m.c, m.c.cfg.HostID
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A session of a generation the fleet left initialises nothing.
		ident, err := m.readIdentity(ctx)
		if err != nil {
			return err
		}
		if err := m.void(ident); err != nil {
			return err
		}
		ii, err := m.readInit(ctx)
		switch classify(err) {
		case classOK:
		case classFatal:
			return c.fatal("GetItem", err)
		default:
			if err := c.sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		if ii.committed != "" {
			m.mu.Lock()
			m.committed = ii.committed
			m.mu.Unlock()
			return init(ctx, sharedStore{m: m})
		}
		m.mu.Lock()
		busy := ii.lockOwner != "" && ii.lockOwner != me && m.aliveOrUnknown(ii.lockOwner, c.clk.Now())
		m.mu.Unlock()
		if busy {
			// Wait for a round: the holder commits, or is seen dead.
			select {
			case <-m.nextRound():
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		token := newToken()
		ok, err := m.lock(ctx, ii, token)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := init(ctx, stagingStore{m: m, batch: token}); err != nil {
			m.unlock(token)
			return err
		}
		return m.commitInit(ctx, token)
	}
}

// aliveOrUnknown is alive, except that a host not observed yet counts as
// alive until it has been watched for LeaseDuration. m.mu must be held.
func (m *member) aliveOrUnknown(id string, now time.Time) bool {
	if _, ok := m.seen[id]; !ok {
		m.seen[id] = seen{counter: unknownCounter, at: now}
	}
	return m.alive(id, now)
}

func (m *member) readInit(ctx context.Context) (initItem, error) {
	item, err := m.c.get(ctx, m.part, itemInit)
	if err != nil || item == nil {
		return initItem{}, err
	}
	return decodeInit(item)
}

// lock writes the initialisation lock with token; ok reports whether we
// hold it.
func (m *member) lock(ctx context.Context, was initItem, token string) (ok bool, err error) {
	c := m.c
	in := &dynamodb.PutItemInput{
		TableName: aws.String(c.cfg.Table),
		Item: map[string]types.AttributeValue{
			keyStream: s(m.part), keyItem: s(itemInit),
			"ver": n(was.ver + 1), "lockOwner": s(c.cfg.HostID), "lockToken": s(token),
		},
	}
	if !was.t0.IsZero() {
		// The first holder's start time outlives it (see SaveStart).
		in.Item["t0"] = s(was.t0.UTC().Format(time.RFC3339Nano))
	}
	if !was.exists {
		in.ConditionExpression = aws.String("attribute_not_exists(#i)")
		in.ExpressionAttributeNames = map[string]string{"#i": keyItem}
	} else {
		in.ConditionExpression = aws.String("#v = :v AND attribute_not_exists(#cm)")
		in.ExpressionAttributeNames = map[string]string{"#v": "ver", "#cm": "committed"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": n(was.ver)}
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	_, err = c.api.PutItem(cctx, in)
	cancel()
	switch classify(err) {
	case classOK:
		return true, nil
	case classFatal:
		return false, c.fatal("PutItem", err)
	case classCondition:
		return false, nil
	}
	// Unknown: read back.
	for attempt := 0; ; attempt++ {
		ii, err := m.readInit(ctx)
		switch classify(err) {
		case classOK:
			return ii.lockToken == token && ii.committed == "", nil
		case classFatal:
			return false, c.fatal("GetItem", err)
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return false, err
		}
	}
}

// unlock clears the lock after a failed init, so that another host need
// not wait for this one's expiry. Best effort.
func (m *member) unlock(token string) {
	c := m.c
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
	defer cancel()
	_, _ = c.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.cfg.Table),
		Key:                       itemKey(m.part, itemInit),
		UpdateExpression:          aws.String("REMOVE #o SET #v = #v + :one"),
		ConditionExpression:       aws.String("#t = :t AND attribute_not_exists(#cm)"),
		ExpressionAttributeNames:  map[string]string{"#o": "lockOwner", "#v": "ver", "#t": "lockToken", "#cm": "committed"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":t": s(token)},
	})
}

// commitInit writes the commit naming batch token, on condition that the
// lock is still ours and nothing is committed.
func (m *member) commitInit(ctx context.Context, token string) error {
	c := m.c
	lost := func(why kinesisload.LostReason, reason string) error {
		return &kinesisload.LeaseLostError{Stream: m.stream, Why: why, Reason: reason}
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.mu.Lock()
		fenced := m.fenced || m.fenceDue(c.clk.Now())
		m.mu.Unlock()
		if fenced {
			return lost(kinesisload.LostSelfFenced, "fenced before the commit: no heartbeat landed for too long")
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		_, err := c.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(c.cfg.Table),
			Key:                       itemKey(m.part, itemInit),
			UpdateExpression:          aws.String("SET #cm = :t, #v = #v + :one"),
			ConditionExpression:       aws.String("#t = :t AND attribute_not_exists(#cm)"),
			ExpressionAttributeNames:  map[string]string{"#cm": "committed", "#v": "ver", "#t": "lockToken"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":t": s(token)},
		})
		cancel()
		cl := classify(err)
		if cl == classFatal {
			return c.fatal("UpdateItem", err)
		}
		if cl != classOK {
			// Read back: landed, refused, or to write again.
			ii, rerr := m.readInit(ctx)
			switch {
			case rerr != nil:
				cl = classUnknown
			case ii.committed == token:
				cl = classOK
			case ii.lockToken != token || ii.committed != "":
				return lost(kinesisload.LostCommitRefused, "another host holds the initialisation lock or committed")
			default:
				cl = classUnknown
			}
		}
		if cl == classOK {
			m.mu.Lock()
			m.committed = token
			m.mu.Unlock()
			m.signal()
			return nil
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// sharedStore is the shared progress of a stream, through one member: its
// Load shows what is committed, its Save merges into the items.
type sharedStore struct{ m *member }

var _ kinesisload.PositionStore = sharedStore{}

func (st sharedStore) check(ctx context.Context, stream string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stream != st.m.stream {
		return fmt.Errorf("dynamo: the membership of stream %s used for stream %s", st.m.stream, stream)
	}
	return nil
}

// snapshot reads the stream's items, retrying transient errors.
func (m *member) snapshot(ctx context.Context) (*snapshot, error) {
	c := m.c
	for attempt := 0; ; attempt++ {
		snap, err := c.query(ctx, m.part)
		switch classify(err) {
		case classOK:
			if snap.init.committed != "" {
				m.mu.Lock()
				m.committed = snap.init.committed
				m.mu.Unlock()
			}
			return snap, nil
		case classFatal:
			return nil, c.fatal("Query", err)
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return nil, fmt.Errorf("dynamo: stream %s: reading the table: %w", m.stream, err)
		}
	}
}

// Load implements [kinesisload.PositionStore]: one Query of the stream's
// items; only the committed initialisation batch's positions count.
func (st sharedStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	if err := st.check(ctx, stream); err != nil {
		return nil, err
	}
	snap, err := st.m.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]kinesisload.ShardProgress{}
	for id, it := range snap.shards {
		p := it.visible(snap.init.committed)
		if p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0 {
			continue // pending only: invisible
		}
		p.Parents = slices.Clone(p.Parents)
		out[id] = p
	}
	return out, nil
}

// Save implements [kinesisload.PositionStore]: each update is merged into
// its shard's item by a conditional write (on the item's version); an
// update that changes nothing is not written.
func (st sharedStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	return st.m.saveEach(ctx, updates, func(it *shardItem, committed string, u kinesisload.ShardProgress) *shardItem {
		v := it.visible(committed)
		nv := kinesisload.MergeProgress(v, u)
		if it.exists && same(nv, v) {
			return nil
		}
		return it.folded(nv, committed)
	})
}

// saveEach applies mutate to the item of every update: one Query, then a
// conditional write per item that changes.
func (m *member) saveEach(ctx context.Context, updates []kinesisload.ShardProgress, mutate func(it *shardItem, committed string, u kinesisload.ShardProgress) *shardItem) error {
	for _, u := range updates {
		if u.ShardID == "" {
			return fmt.Errorf("dynamo: save to stream %s: an update has no shard ID", m.stream)
		}
	}
	if len(updates) == 0 {
		return nil
	}
	snap, err := m.snapshot(ctx)
	if err != nil {
		return err
	}
	for _, u := range updates {
		was := snap.shards[u.ShardID]
		if was == nil {
			was = &shardItem{id: u.ShardID}
		}
		err := m.update(ctx, u.ShardID, was, func(it *shardItem) *shardItem {
			m.mu.Lock()
			committed := m.committed
			m.mu.Unlock()
			return mutate(it, committed, u)
		}, 0)
		if err != nil {
			return fmt.Errorf("dynamo: save to stream %s: shard %s: %w", m.stream, u.ShardID, err)
		}
	}
	return nil
}

// readIdentity reads the stream's identity item (in the stream's own
// partition), retrying transient errors.
func (m *member) readIdentity(ctx context.Context) (identityItem, error) {
	c := m.c
	for attempt := 0; ; attempt++ {
		item, err := c.get(ctx, m.stream, itemIdentity)
		switch classify(err) {
		case classOK:
			if item == nil {
				return identityItem{}, nil
			}
			ii, err := decodeIdentity(item)
			if err != nil {
				return ii, fmt.Errorf("dynamo: table %s: stream %s: %w", c.cfg.Table, m.stream, err)
			}
			return ii, nil
		case classFatal:
			return identityItem{}, c.fatal("GetItem", err)
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return identityItem{}, err
		}
	}
}

// Identity implements [kinesisload.PositionStore]: the stream's identity
// item, when its generation is the session's; when the fleet started over
// since, an error wrapping a [*kinesisload.StreamMismatchError] (see
// StartOver).
func (st sharedStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	if err := st.check(ctx, stream); err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	ii, err := st.m.readIdentity(ctx)
	if err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	if ii.gen != st.m.gen {
		return kinesisload.StreamIdentity{}, st.m.void(ii)
	}
	return ii.id, nil
}

// SetIdentity implements [kinesisload.PositionStore]: a conditional write
// of the identity item (it must be absent), then a read to compare.
func (st sharedStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("dynamo: stream %s: SetIdentity with the zero StreamIdentity", stream)
	}
	m, c := st.m, st.m.c
	for attempt := 0; ; attempt++ {
		ii, err := m.readIdentity(ctx)
		if err != nil {
			return err
		}
		if ii.gen != m.gen {
			return m.void(ii)
		}
		if !ii.id.IsZero() {
			if ii.id.Equal(id) {
				return nil
			}
			return &kinesisload.StreamMismatchError{Stream: stream, Stored: ii.id, Current: id}
		}
		item, err := identityItem{id: id}.attrs(stream)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		_, err = c.api.PutItem(cctx, &dynamodb.PutItemInput{
			TableName:                aws.String(c.cfg.Table),
			Item:                     item,
			ConditionExpression:      aws.String("attribute_not_exists(#i)"),
			ExpressionAttributeNames: map[string]string{"#i": keyItem},
		})
		cancel()
		switch classify(err) {
		case classOK:
			return nil
		case classFatal:
			return c.fatal("PutItem", err)
		case classUnknown:
			if err := c.sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		// Condition failed or unknown: the read at the top decides.
	}
}

// StartOver implements [kinesisload.PositionStore] for a fleet: one
// conditional write of the identity item, from (the stored identity, the
// session's generation) to (id, the next generation), which every other
// host's next round reads. Whoever wins, the session's generation is
// over: StartOver returns an error wrapping a
// [*kinesisload.StreamMismatchError] (the Loader starts a new session,
// which joins the new generation's partition and initialises it through
// its lock, as a first run), and every lease of the session is void. The
// old generation's items stay as they are, its archive ([Coordinator.Inspect]
// shows them). StartOver does nothing when id is the stored identity of
// the session's generation, and refuses an id created no later than the
// stored one (a host whose view of the stream is older than the fleet's
// must not move it back). A write whose answer was lost is read back.
func (st sharedStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	if err := st.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("dynamo: stream %s: StartOver with the zero StreamIdentity", stream)
	}
	m, c := st.m, st.m.c
	for attempt := 0; ; attempt++ {
		ii, err := m.readIdentity(ctx)
		if err != nil {
			return err
		}
		switch {
		case ii.gen != m.gen:
			return m.void(ii)
		case ii.id.Equal(id):
			return nil
		case !ii.id.IsZero() && !id.Created.After(ii.id.Created):
			return fmt.Errorf("dynamo: table %s: stream %s: start over on %s refused: the fleet's generation %d reads %s, created later or at once "+
				"(a host may start the fleet over only on a stream created after the one it reads)", c.cfg.Table, stream, id, ii.gen, ii.id)
		}
		next := identityItem{id: id, gen: ii.gen + 1,
			archived: append(slices.Clone(ii.archived), Generation{Gen: ii.gen, Identity: ii.id, ReplacedBy: id})}
		item, err := next.attrs(stream)
		if err != nil {
			return err
		}
		in := &dynamodb.PutItemInput{TableName: aws.String(c.cfg.Table), Item: item}
		if !ii.exists {
			in.ConditionExpression = aws.String("attribute_not_exists(#i)")
			in.ExpressionAttributeNames = map[string]string{"#i": keyItem}
		} else {
			cond := "#a = :a AND #c = :c AND #g = :g"
			if ii.gen == 0 {
				cond = "#a = :a AND #c = :c AND attribute_not_exists(#g)"
			}
			in.ConditionExpression = aws.String(cond)
			in.ExpressionAttributeNames = map[string]string{"#a": "arn", "#c": "created", "#g": "gen"}
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":a": s(ii.id.ARN), ":c": s(ii.id.Created.UTC().Format(time.RFC3339Nano))}
			if ii.gen > 0 {
				in.ExpressionAttributeValues[":g"] = n(ii.gen)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		_, err = c.api.PutItem(cctx, in)
		cancel()
		switch classify(err) {
		case classFatal:
			return c.fatal("PutItem", err)
		case classUnknown:
			if err := c.sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		// Landed, refused or unknown: the read at the top tells which
		// generation is in force.
	}
}

// stagingStore is the store of the host that holds the initialisation
// lock: Load shows what is committed; Save writes pending positions under
// the lock's token, visible only once the commit names it.
type stagingStore struct {
	m     *member
	batch string
}

var _ kinesisload.PositionStore = stagingStore{}

func (st stagingStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	return st.m.shared().Load(ctx, stream)
}

func (m *member) shared() sharedStore { return sharedStore{m: m} }

func (st stagingStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	if err := st.m.shared().check(ctx, stream); err != nil {
		return err
	}
	return st.m.saveEach(ctx, updates, func(it *shardItem, _ string, u kinesisload.ShardProgress) *shardItem {
		p, ok := it.pend[st.batch]
		p.ShardID = u.ShardID
		np := kinesisload.MergeProgress(p, u)
		if ok && same(np, p) {
			return nil
		}
		next := *it
		next.pend = make(map[string]kinesisload.ShardProgress, len(it.pend)+1)
		for k, v := range it.pend {
			next.pend[k] = v
		}
		next.pend[st.batch] = np
		return &next
	})
}

var _ kinesisload.StartStore = stagingStore{}

// LoadStart implements [kinesisload.StartStore]: the t0 of the init item,
// saved by this or an earlier holder of the initialisation lock; in a
// generation started over (see StartOver) that none saved,
// [kinesisload.StartOverT0] of its stream.
func (st stagingStore) LoadStart(ctx context.Context, stream string) (time.Time, bool, error) {
	m, c := st.m, st.m.c
	if err := m.shared().check(ctx, stream); err != nil {
		return time.Time{}, false, err
	}
	for attempt := 0; ; attempt++ {
		ii, err := m.readInit(ctx)
		switch classify(err) {
		case classOK:
			if ii.t0.IsZero() && m.gen > 0 {
				ident, err := m.readIdentity(ctx)
				if err != nil {
					return time.Time{}, false, err
				}
				if ident.gen == m.gen {
					return kinesisload.StartOverT0(ident.id), true, nil
				}
			}
			return ii.t0, !ii.t0.IsZero(), nil
		case classFatal:
			return time.Time{}, false, c.fatal("GetItem", err)
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return time.Time{}, false, err
		}
	}
}

// SaveStart implements [kinesisload.StartStore]: t0 is written into the
// init item unless one is there (if_not_exists), on condition that the
// lock is still ours and nothing is committed; the version moves, so that
// a host taking the lock on an older read fails and reads it again. A
// write whose answer was lost is read back. When the lock is another
// host's, a [*kinesisload.LeaseLostError].
func (st stagingStore) SaveStart(ctx context.Context, stream string, t0 time.Time) (time.Time, error) {
	m, c := st.m, st.m.c
	if err := m.shared().check(ctx, stream); err != nil {
		return time.Time{}, err
	}
	if t0.IsZero() {
		return time.Time{}, fmt.Errorf("dynamo: stream %s: SaveStart with the zero time", stream)
	}
	if pending, ok, err := st.LoadStart(ctx, stream); err != nil || ok {
		return pending, err
	}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		out, err := c.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(c.cfg.Table),
			Key:                       itemKey(m.part, itemInit),
			UpdateExpression:          aws.String("SET #t0 = if_not_exists(#t0, :t0), #v = #v + :one"),
			ConditionExpression:       aws.String("#t = :t AND attribute_not_exists(#cm)"),
			ExpressionAttributeNames:  map[string]string{"#t0": "t0", "#v": "ver", "#t": "lockToken", "#cm": "committed"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":t0": s(t0.UTC().Format(time.RFC3339Nano)), ":one": n(1), ":t": s(st.batch)},
			ReturnValues:              types.ReturnValueAllNew,
		})
		cancel()
		cl := classify(err)
		if cl == classFatal {
			return time.Time{}, c.fatal("UpdateItem", err)
		}
		if cl == classOK {
			ii, err := decodeInit(out.Attributes)
			if err != nil {
				return time.Time{}, fmt.Errorf("dynamo: table %s: stream %s: %w", c.cfg.Table, m.stream, err)
			}
			return ii.t0, nil
		}
		// Refused or unknown: read back.
		ii, rerr := m.readInit(ctx)
		switch {
		case rerr != nil:
		case ii.lockToken != st.batch || ii.committed != "":
			return time.Time{}, &kinesisload.LeaseLostError{Stream: m.stream, Why: kinesisload.LostCommitRefused,
				Reason: "another host took the initialisation lock or committed before the start time was saved"}
		case !ii.t0.IsZero():
			return ii.t0, nil // landed
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return time.Time{}, err
		}
	}
}

// ClearStart implements [kinesisload.StartStore]: nothing is written. The
// t0 stays in the init item, where only a holder of the lock before the
// commit reads it (the commit makes it moot), so that a host taking over
// from one that died after ClearStart still resolves at it.
func (st stagingStore) ClearStart(ctx context.Context, stream string) error {
	return st.m.shared().check(ctx, stream)
}

// Identity implements [kinesisload.PositionStore] (as the shared store).
func (st stagingStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	return st.m.shared().Identity(ctx, stream)
}

// SetIdentity implements [kinesisload.PositionStore] (as the shared
// store: every host of the fleet sees the same stream, so it is
// idempotent).
func (st stagingStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return st.m.shared().SetIdentity(ctx, stream, id)
}

// StartOver implements [kinesisload.PositionStore] (as the shared store).
func (st stagingStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return st.m.shared().StartOver(ctx, stream, id)
}
