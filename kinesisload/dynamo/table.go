package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/tidemark/tidemark/kinesisload"
)

// API is the part of the DynamoDB client the Coordinator uses, one method
// per operation, with the SDK's signatures. A *dynamodb.Client satisfies
// it; so can a wrapper that counts or injects faults.
type API interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Errors of the Coordinator, checked with errors.Is.
var (
	// ErrTableMissing is wrapped when the table does not exist and
	// Config.CreateTable is false.
	ErrTableMissing = errors.New("dynamo: table does not exist")
	// ErrAccessDenied is wrapped when DynamoDB refused a call for want of
	// a permission; the [*TableError] names it.
	ErrAccessDenied = errors.New("dynamo: access denied")
	// ErrTableSchema is wrapped when the table exists with another key
	// than stream (S, partition) and item (S, sort).
	ErrTableSchema = errors.New("dynamo: the table's key is not stream (S) + item (S)")
)

// TableError is an error no retry fixes: the table is missing, has
// another key, or a permission is missing. It names the table, the
// operation and the IAM permission it needs.
type TableError struct {
	// Table is Config.Table.
	Table string
	// Op is the DynamoDB operation, e.g. "DescribeTable".
	Op string
	// Permission is the IAM action the operation needs, e.g.
	// "dynamodb:CreateTable".
	Permission string
	// Kind is ErrTableMissing, ErrAccessDenied, ErrTableSchema, or nil.
	Kind error
	// Err is DynamoDB's error, if any.
	Err error
}

// Error says what failed, on which table, and what would fix it.
func (e *TableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dynamo: table %s: %s", e.Table, e.Op)
	switch {
	case errors.Is(e.Kind, ErrTableMissing):
		fmt.Fprintf(&b, ": the table does not exist; create it (partition key %q S, sort key %q S) or set Config.CreateTable, which needs the IAM permission dynamodb:CreateTable", keyStream, keyItem)
	case errors.Is(e.Kind, ErrAccessDenied):
		fmt.Fprintf(&b, ": access denied: the IAM permission %s is needed", e.Permission)
	case e.Kind != nil:
		fmt.Fprintf(&b, ": %v", e.Kind)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns Kind and Err.
func (e *TableError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Key attributes and item names.
const (
	keyStream = "stream"
	keyItem   = "item"

	itemInit     = "init"
	itemIdentity = "identity"
	prefixShard  = "shard#"
	prefixHost   = "host#"
)

// ErrBadItem is wrapped by the error for an item of the table that cannot
// be decoded (edited by hand, or written by an incompatible version), or a
// value that cannot be encoded into one. No retry fixes it: the
// Coordinator reports it (in a [*TableError]) instead of retrying, and the
// Loader stops.
var ErrBadItem = errors.New("dynamo: an item of the table cannot be decoded or encoded")

// badItem marks err, a failure to decode or encode an item, with
// [ErrBadItem]; nil stays nil.
func badItem(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrBadItem, err)
}

// errorClass is how the Coordinator treats a DynamoDB error.
type errorClass int

const (
	classOK errorClass = iota
	// classCondition: the write's condition failed; nothing landed.
	classCondition
	// classFatal: no retry fixes it.
	classFatal
	// classUnknown: transient (throttling, 5xx, a timeout, a lost
	// connection); a write may or may not have landed.
	classUnknown
)

var fatalCodes = map[string]string{
	"AccessDeniedException":               "",
	"ResourceNotFoundException":           "",
	"ValidationException":                 "",
	"UnrecognizedClientException":         "",
	"InvalidSignatureException":           "",
	"MissingAuthenticationTokenException": "",
	"IncompleteSignatureException":        "",
	"SerializationException":              "",
}

func classify(err error) errorClass {
	if err == nil {
		return classOK
	}
	if errors.Is(err, ErrBadItem) {
		return classFatal
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return classCondition
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if _, ok := fatalCodes[ae.ErrorCode()]; ok {
			return classFatal
		}
	}
	return classUnknown
}

// permission names the IAM action of an operation.
func permission(op string) string { return "dynamodb:" + op }

// fatal wraps a fatal error of op as a *TableError.
func (c *Coordinator) fatal(op string, err error) error {
	te := &TableError{Table: c.cfg.Table, Op: op, Permission: permission(op), Err: err}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AccessDeniedException", "UnrecognizedClientException":
			te.Kind = ErrAccessDenied
		case "ResourceNotFoundException":
			te.Kind = ErrTableMissing
		}
	}
	return te
}

// ensureTable checks that the table exists with the right key, creating
// it when Config.CreateTable allows. It succeeds once per Coordinator.
func (c *Coordinator) ensureTable(ctx context.Context) error {
	c.tableMu.Lock()
	defer c.tableMu.Unlock()
	if c.tableOK {
		return nil
	}
	for {
		out, err := c.callDescribe(ctx)
		switch cl := classify(err); {
		case cl == classOK:
			if out.Table == nil {
				return &TableError{Table: c.cfg.Table, Op: "DescribeTable", Permission: permission("DescribeTable"), Kind: errors.New("no table description")}
			}
			if err := checkSchema(out.Table); err != nil {
				return &TableError{Table: c.cfg.Table, Op: "DescribeTable", Permission: permission("DescribeTable"), Kind: ErrTableSchema, Err: err}
			}
			if out.Table.TableStatus == types.TableStatusActive || out.Table.TableStatus == types.TableStatusUpdating {
				c.tableOK = true
				return nil
			}
			// CREATING: wait.
		case isNotFound(err):
			if !c.cfg.CreateTable {
				return &TableError{Table: c.cfg.Table, Op: "DescribeTable", Permission: permission("CreateTable"), Kind: ErrTableMissing}
			}
			if err := c.createTable(ctx); err != nil {
				return err
			}
		case cl == classFatal:
			return c.fatal("DescribeTable", err)
		}
		if err := c.sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("dynamo: table %s: waiting until it is ACTIVE: %w", c.cfg.Table, err)
		}
	}
}

func (c *Coordinator) callDescribe(ctx context.Context) (*dynamodb.DescribeTableOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	return c.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(c.cfg.Table)})
}

func isNotFound(err error) bool {
	var rnf *types.ResourceNotFoundException
	return errors.As(err, &rnf)
}

func checkSchema(t *types.TableDescription) error {
	var hash, rng string
	for _, k := range t.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	if hash != keyStream || rng != keyItem {
		return fmt.Errorf("its key is %q + %q", hash, rng)
	}
	return nil
}

func (c *Coordinator) createTable(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	_, err := c.api.CreateTable(cctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(c.cfg.Table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(keyStream), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(keyItem), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(keyStream), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(keyItem), KeyType: types.KeyTypeRange},
		},
	})
	var inUse *types.ResourceInUseException
	switch {
	case err == nil, errors.As(err, &inUse): // another host creates it
		return nil
	case classify(err) == classFatal:
		return c.fatal("CreateTable", err)
	}
	return nil // transient: DescribeTable tells
}

// shardItem is a shard's item.
type shardItem struct {
	id     string
	exists bool
	// ver counts the writes of the item: every write is conditional on
	// it, so a read-modify-write never loses another's write.
	ver     uint64
	owner   string
	epoch   uint64
	handoff string
	prog    kinesisload.ShardProgress
	// pend holds the positions saved by initialisations, by batch
	// token; only the committed batch's count.
	pend map[string]kinesisload.ShardProgress
	// rate is the shard's rate in bytes/s when its owner released it
	// (balancing by throughput), to seed the next owner's; 0 otherwise.
	rate float64
}

// visible is the item's progress as every host sees it, given the
// committed initialisation batch.
func (it *shardItem) visible(committed string) kinesisload.ShardProgress {
	p := it.prog
	if committed != "" {
		if q, ok := it.pend[committed]; ok {
			p = kinesisload.MergeProgress(p, q)
		}
	}
	p.ShardID = it.id
	return p
}

// folded returns a copy of it whose progress is p and whose pending
// positions are dropped when the committed batch is known (they are in p).
func (it *shardItem) folded(p kinesisload.ShardProgress, committed string) *shardItem {
	n := *it
	n.prog = p
	if committed != "" {
		n.pend = nil
	}
	return &n
}

func (it *shardItem) attrs(stream string) (map[string]types.AttributeValue, error) {
	m, err := it.encode(stream)
	return m, badItem(err)
}

func (it *shardItem) encode(stream string) (map[string]types.AttributeValue, error) {
	prog, err := json.Marshal(it.prog)
	if err != nil {
		return nil, fmt.Errorf("dynamo: stream %s: shard %s: encode progress: %w", stream, it.id, err)
	}
	m := map[string]types.AttributeValue{
		keyStream: s(stream),
		keyItem:   s(prefixShard + it.id),
		"ver":     n(it.ver),
		"epoch":   n(it.epoch),
		"prog":    s(string(prog)),
	}
	if it.owner != "" {
		m["owner"] = s(it.owner)
	}
	if it.handoff != "" {
		m["handoff"] = s(it.handoff)
	}
	if it.rate > 0 {
		m["rate"] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(it.rate, 'f', 0, 64)}
	}
	if len(it.pend) > 0 {
		pm := map[string]types.AttributeValue{}
		for tok, p := range it.pend {
			b, err := json.Marshal(p)
			if err != nil {
				return nil, fmt.Errorf("dynamo: stream %s: shard %s: encode pending progress: %w", stream, it.id, err)
			}
			pm[tok] = s(string(b))
		}
		m["pend"] = &types.AttributeValueMemberM{Value: pm}
	}
	return m, nil
}

func decodeShard(id string, m map[string]types.AttributeValue) (*shardItem, error) {
	it, err := parseShard(id, m)
	if err != nil {
		return nil, badItem(err)
	}
	return it, nil
}

func parseShard(id string, m map[string]types.AttributeValue) (*shardItem, error) {
	it := &shardItem{id: id, exists: true}
	var err error
	if it.ver, err = getN(m, "ver"); err != nil {
		return nil, fmt.Errorf("shard %s: %w", id, err)
	}
	if it.epoch, err = getN(m, "epoch"); err != nil {
		return nil, fmt.Errorf("shard %s: %w", id, err)
	}
	it.owner, it.handoff = getS(m, "owner"), getS(m, "handoff")
	it.rate = getRate(m["rate"])
	if raw := getS(m, "prog"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &it.prog); err != nil {
			return nil, fmt.Errorf("shard %s: decode progress: %w", id, err)
		}
	}
	it.prog.ShardID = id
	if pm, ok := m["pend"].(*types.AttributeValueMemberM); ok {
		it.pend = map[string]kinesisload.ShardProgress{}
		for tok, v := range pm.Value {
			sv, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("shard %s: pending batch %s is not a string", id, tok)
			}
			var p kinesisload.ShardProgress
			if err := json.Unmarshal([]byte(sv.Value), &p); err != nil {
				return nil, fmt.Errorf("shard %s: decode pending progress: %w", id, err)
			}
			p.ShardID = id
			it.pend[tok] = p
		}
	}
	return it, nil
}

// initItem is the stream's initialisation decision.
type initItem struct {
	exists               bool
	ver                  uint64
	lockOwner, lockToken string
	committed            string
	// t0 is the start time the first lock holder saved (zero: none); every
	// later holder keeps it.
	t0 time.Time
}

// heart is a host's heartbeat item.
type heart struct {
	counter uint64
	left    bool
	// rates is the rate in bytes/s of each shard the host held at its
	// last heartbeat, when balancing by throughput.
	rates map[string]float64
}

// getRate decodes a rate attribute; anything else is 0 (no rate known).
func getRate(v types.AttributeValue) float64 {
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	r, err := strconv.ParseFloat(nv.Value, 64)
	if err != nil || r < 0 {
		return 0
	}
	return r
}

// rateAttr encodes rates as a map attribute.
func rateAttr(rates map[string]float64) types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(rates))
	for id, r := range rates {
		m[id] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(r, 'f', 0, 64)}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// snapshot is one consistent Query of a stream's items (consistent per
// item; the Query is one read of the partition).
type snapshot struct {
	shards map[string]*shardItem
	hearts map[string]heart
	init   initItem
	// ident is the identity item, read only in the stream's own
	// partition (generation 0's).
	ident identityItem
}

func (c *Coordinator) query(ctx context.Context, stream string) (*snapshot, error) {
	snap := &snapshot{shards: map[string]*shardItem{}, hearts: map[string]heart{}}
	var start map[string]types.AttributeValue
	for {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		out, err := c.api.Query(cctx, &dynamodb.QueryInput{
			TableName:                 aws.String(c.cfg.Table),
			KeyConditionExpression:    aws.String("#s = :s"),
			ExpressionAttributeNames:  map[string]string{"#s": keyStream},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": s(stream)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, m := range out.Items {
			if err := snap.add(m); err != nil {
				return nil, fmt.Errorf("dynamo: table %s: stream %s: %w", c.cfg.Table, stream, err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return snap, nil
		}
		start = out.LastEvaluatedKey
	}
}

func (snap *snapshot) add(m map[string]types.AttributeValue) error {
	key := getS(m, keyItem)
	switch {
	case strings.HasPrefix(key, prefixShard):
		it, err := decodeShard(strings.TrimPrefix(key, prefixShard), m)
		if err != nil {
			return err
		}
		snap.shards[it.id] = it
	case strings.HasPrefix(key, prefixHost):
		counter, err := getN(m, "counter")
		if err != nil {
			return badItem(fmt.Errorf("host %s: %w", strings.TrimPrefix(key, prefixHost), err))
		}
		hb := heart{counter: counter, left: getBool(m, "left")}
		if rm, ok := m["rates"].(*types.AttributeValueMemberM); ok {
			hb.rates = make(map[string]float64, len(rm.Value))
			for id, v := range rm.Value {
				hb.rates[id] = getRate(v)
			}
		}
		snap.hearts[strings.TrimPrefix(key, prefixHost)] = hb
	case key == itemInit:
		ii, err := decodeInit(m)
		if err != nil {
			return err
		}
		snap.init = ii
	case key == itemIdentity:
		ii, err := decodeIdentity(m)
		if err != nil {
			return err
		}
		snap.ident = ii
	}
	return nil
}

func decodeInit(m map[string]types.AttributeValue) (initItem, error) {
	ii, err := parseInit(m)
	if err != nil {
		return ii, badItem(fmt.Errorf("the initialisation item: %w", err))
	}
	return ii, nil
}

func parseInit(m map[string]types.AttributeValue) (initItem, error) {
	ver, err := getN(m, "ver")
	if err != nil {
		return initItem{}, err
	}
	ii := initItem{exists: true, ver: ver, lockOwner: getS(m, "lockOwner"), lockToken: getS(m, "lockToken"), committed: getS(m, "committed")}
	if raw := getS(m, "t0"); raw != "" {
		if ii.t0, err = time.Parse(time.RFC3339Nano, raw); err != nil {
			return initItem{}, fmt.Errorf("the init item's t0 %q: %w", raw, err)
		}
	}
	return ii, nil
}

// identityItem is the stream's identity item: the identity of the stream
// the current generation reads, the generation, and the generations
// archived by start-overs.
type identityItem struct {
	exists   bool
	id       kinesisload.StreamIdentity
	gen      uint64
	archived []Generation
}

func decodeIdentity(m map[string]types.AttributeValue) (identityItem, error) {
	ii, err := parseIdentity(m)
	return ii, badItem(err)
}

func parseIdentity(m map[string]types.AttributeValue) (identityItem, error) {
	ii := identityItem{exists: true, id: kinesisload.StreamIdentity{ARN: getS(m, "arn")}}
	if raw := getS(m, "created"); raw != "" {
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return ii, fmt.Errorf("identity: created %q: %w", raw, err)
		}
		ii.id.Created = t
	}
	var err error
	if ii.gen, err = getN(m, "gen"); err != nil {
		return ii, fmt.Errorf("identity: %w", err)
	}
	if raw := getS(m, "archived"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &ii.archived); err != nil {
			return ii, fmt.Errorf("identity: archived generations %q: %w", raw, err)
		}
	}
	return ii, nil
}

// attrs encodes the identity item of stream.
func (ii identityItem) attrs(stream string) (map[string]types.AttributeValue, error) {
	m, err := ii.encode(stream)
	return m, badItem(err)
}

func (ii identityItem) encode(stream string) (map[string]types.AttributeValue, error) {
	m := map[string]types.AttributeValue{
		keyStream: s(stream), keyItem: s(itemIdentity),
		"arn": s(ii.id.ARN), "created": s(ii.id.Created.UTC().Format(time.RFC3339Nano)),
	}
	if ii.gen > 0 {
		m["gen"] = n(ii.gen)
	}
	if len(ii.archived) > 0 {
		b, err := json.Marshal(ii.archived)
		if err != nil {
			return nil, fmt.Errorf("dynamo: stream %s: encode the archived generations: %w", stream, err)
		}
		m["archived"] = s(string(b))
	}
	return m, nil
}

// epochBase is where the epochs of generation gen start: a lease of a
// later generation has an epoch above every one of the earlier (2^32
// owner changes per shard and generation), so that the epoch grows across
// a start-over too, and a TransactionalSink fencing by it refuses a late
// batch of the old generation's owner.
func epochBase(gen uint64) uint64 { return gen << 32 }

// partition is the partition key of stream's generation gen: the stream's
// name for generation 0 (the only one before a start-over, and the home of
// the identity item), name#genN after N start-overs ('#' is in no stream
// name).
func partition(stream string, gen uint64) string {
	if gen == 0 {
		return stream
	}
	return fmt.Sprintf("%s#gen%d", stream, gen)
}

// get reads one item with a consistent read; nil when absent.
func (c *Coordinator) get(ctx context.Context, stream, key string) (map[string]types.AttributeValue, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	out, err := c.api.GetItem(cctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.cfg.Table),
		Key:            itemKey(stream, key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

func (c *Coordinator) getShard(ctx context.Context, stream, id string) (*shardItem, error) {
	m, err := c.get(ctx, stream, prefixShard+id)
	if err != nil || m == nil {
		return &shardItem{id: id}, err
	}
	it, err := decodeShard(id, m)
	if err != nil {
		return nil, fmt.Errorf("dynamo: table %s: stream %s: %w", c.cfg.Table, stream, err)
	}
	return it, nil
}

// putShard writes next (whose ver must be was.ver+1) on condition that
// the item is still at was.ver (absent when !was.exists), and, when
// fence is true, still owned by was.owner at was.epoch.
func (c *Coordinator) putShard(ctx context.Context, stream string, was, next *shardItem, fence bool) error {
	attrs, err := next.attrs(stream)
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(c.cfg.Table), Item: attrs}
	if !was.exists {
		in.ConditionExpression = aws.String("attribute_not_exists(#i)")
		in.ExpressionAttributeNames = map[string]string{"#i": keyItem}
	} else {
		in.ExpressionAttributeNames = map[string]string{"#v": "ver"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": n(was.ver)}
		cond := "#v = :v"
		if fence {
			cond += " AND #o = :o AND #e = :e"
			in.ExpressionAttributeNames["#o"], in.ExpressionAttributeNames["#e"] = "owner", "epoch"
			in.ExpressionAttributeValues[":o"], in.ExpressionAttributeValues[":e"] = s(was.owner), n(was.epoch)
		}
		in.ConditionExpression = aws.String(cond)
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	_, err = c.api.PutItem(cctx, in)
	return err
}

func itemKey(stream, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{keyStream: s(stream), keyItem: s(key)}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(v, 10)}
}

func getS(m map[string]types.AttributeValue, k string) string {
	if v, ok := m[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(m map[string]types.AttributeValue, k string) (uint64, error) {
	v, ok := m[k].(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	x, err := strconv.ParseUint(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s = %q: %w", k, v.Value, err)
	}
	return x, nil
}

func getBool(m map[string]types.AttributeValue, k string) bool {
	v, ok := m[k].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}
