package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// API is the part of the DynamoDB client the table uses, one method per
// operation, with the SDK's signatures. A *dynamodb.Client satisfies it;
// so can a wrapper that counts or injects faults.
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

// Errors of the table, checked with errors.Is.
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
	// ErrBadItem is wrapped by the error for an item whose attributes
	// are not of the types the table writes (edited by hand, or written
	// by an incompatible program): no retry fixes it, and the Loader
	// stops with it, naming the item and the attribute.
	ErrBadItem = errors.New("dynamo: an item of the table cannot be decoded")
	// ErrTableUnusable is wrapped when the table exists in a status it
	// does not leave by itself (its KMS key inaccessible, archived, being
	// deleted); the [*TableError] names the status.
	ErrTableUnusable = errors.New("dynamo: the table cannot be used in its status")
)

// TableError is an error no retry fixes: the table is missing, has
// another key, a permission is missing, or an item cannot be decoded. It
// names the table, the operation and the IAM permission it needs.
type TableError struct {
	// Table is Config.Table.
	Table string
	// Op is the DynamoDB operation, e.g. "DescribeTable".
	Op string
	// Permission is the IAM action the operation needs, e.g.
	// "dynamodb:CreateTable".
	Permission string
	// Kind is ErrTableMissing, ErrAccessDenied, ErrTableSchema,
	// ErrBadItem, or nil.
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

// The key attributes, and the attribute that holds an item's version.
const (
	keyStream = "stream"
	keyItem   = "item"
	attrVer   = "ver"
)

// numeric names the fields written as numbers (N): those the tables of
// earlier versions had as numbers. Every other field is a string (S).
var numeric = map[string]bool{"epoch": true, "base": true, "gen": true, "rate": true, "progress": true, "counter": true}

var fatalCodes = map[string]bool{
	"AccessDeniedException":               true,
	"ResourceNotFoundException":           true,
	"ValidationException":                 true,
	"UnrecognizedClientException":         true,
	"InvalidSignatureException":           true,
	"MissingAuthenticationTokenException": true,
	"IncompleteSignatureException":        true,
	"SerializationException":              true,
}

// Table is the DynamoDB [fleet.Table]: items as DynamoDB items with the
// key "stream" (the partition) and "item" (the key), the version in the
// attribute "ver" (N), fields as S attributes (N for the numeric ones an
// earlier version wrote as numbers), maps as M attributes of S. Every write
// is one PutItem, UpdateItem or DeleteItem with a ConditionExpression;
// every read a GetItem or Query with ConsistentRead. An item without "ver"
// (written by an earlier version) is at version 1. An item it creates
// starts at [fleet.NewVersion] (the clock's microseconds): DynamoDB
// forgets a deleted item, and a write made from a read of an earlier life
// of it must not land on the next.
//
// Errors: ConditionalCheckFailedException wraps [fleet.ErrConflict]; an
// error no retry fixes is a [*TableError] (naming the permission for
// AccessDenied); anything else (throttling, 5xx, a timeout, a lost
// connection) wraps [fleet.ErrUnknown].
type Table struct {
	api     API
	name    string
	timeout time.Duration
}

var _ fleet.Table = (*Table)(nil)

// NewTable returns the table name reached through api, each call bounded
// by callTimeout (0: none beyond the caller's context). It does not check
// that the table exists: see [CreateTable] and [Coordinator].
func NewTable(api API, name string, callTimeout time.Duration) *Table {
	return &Table{api: api, name: name, timeout: callTimeout}
}

// permission names the IAM action of an operation.
func permission(op string) string { return "dynamodb:" + op }

// classify turns an error of op into the table's kinds.
func (t *Table) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("%w: %s: %w", fleet.ErrConflict, op, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && fatalCodes[ae.ErrorCode()] {
		te := &TableError{Table: t.name, Op: op, Permission: permission(op), Err: err}
		switch ae.ErrorCode() {
		case "AccessDeniedException", "UnrecognizedClientException":
			te.Kind = ErrAccessDenied
		case "ResourceNotFoundException":
			te.Kind = ErrTableMissing
		}
		return te
	}
	return fmt.Errorf("%w: %s: %w", fleet.ErrUnknown, op, err)
}

func (t *Table) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if t.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, t.timeout)
}

func itemKey(partition, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{keyStream: &types.AttributeValueMemberS{Value: partition}, keyItem: &types.AttributeValueMemberS{Value: key}}
}

// decode turns DynamoDB's attributes into an Item.
func (t *Table) decode(m map[string]types.AttributeValue) (fleet.Item, error) {
	it := fleet.Item{}
	bad := func(attr, why string) error {
		return &TableError{Table: t.name, Op: "decode", Kind: ErrBadItem,
			Err: fmt.Errorf("item %s/%s: attribute %s: %s", it.Partition, it.Key, attr, why)}
	}
	for name, v := range m {
		switch name {
		case keyStream, keyItem:
			s, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				return it, bad(name, "not a string")
			}
			if name == keyStream {
				it.Partition = s.Value
			} else {
				it.Key = s.Value
			}
		}
	}
	for name, v := range m {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			if name == keyStream || name == keyItem {
				continue
			}
			if name == attrVer {
				return it, bad(name, "a string, want a number")
			}
			setField(&it, name, v.Value)
		case *types.AttributeValueMemberN:
			if name == attrVer {
				ver, err := strconv.ParseUint(v.Value, 10, 64)
				if err != nil {
					return it, bad(name, fmt.Sprintf("%q is not a version", v.Value))
				}
				it.Version = ver
				continue
			}
			setField(&it, name, v.Value)
		case *types.AttributeValueMemberBOOL:
			setField(&it, name, strconv.FormatBool(v.Value))
		case *types.AttributeValueMemberM:
			entries := make(map[string]string, len(v.Value))
			for k, e := range v.Value {
				switch e := e.(type) {
				case *types.AttributeValueMemberS:
					entries[k] = e.Value
				case *types.AttributeValueMemberN:
					entries[k] = e.Value
				default:
					return it, bad(name+"."+k, "not a string or a number")
				}
			}
			if it.Maps == nil {
				it.Maps = map[string]map[string]string{}
			}
			it.Maps[name] = entries
		default:
			return it, bad(name, fmt.Sprintf("of an unexpected type %T", v))
		}
	}
	if it.Version == 0 {
		it.Version = 1 // an item of an earlier version (no "ver"), or "ver" set to 0 by hand
	}
	return it, nil
}

func setField(it *fleet.Item, name, v string) {
	if it.Fields == nil {
		it.Fields = map[string]string{}
	}
	it.Fields[name] = v
}

// encode turns an Item into DynamoDB's attributes, at version ver.
func encode(it fleet.Item, ver uint64) map[string]types.AttributeValue {
	m := itemKey(it.Partition, it.Key)
	m[attrVer] = &types.AttributeValueMemberN{Value: strconv.FormatUint(ver, 10)}
	for name, v := range it.Fields {
		if numeric[name] {
			m[name] = &types.AttributeValueMemberN{Value: v}
		} else {
			m[name] = &types.AttributeValueMemberS{Value: v}
		}
	}
	for name, entries := range it.Maps {
		mv := make(map[string]types.AttributeValue, len(entries))
		for k, v := range entries {
			mv[k] = &types.AttributeValueMemberS{Value: v}
		}
		m[name] = &types.AttributeValueMemberM{Value: mv}
	}
	return m
}

// versionCondition is the condition that the stored item is at version
// ver: absent for 0; "ver" equal, absent on an existing item (an earlier
// version's), or 0 (set so by hand), for 1.
func versionCondition(ver uint64, names map[string]string, values map[string]types.AttributeValue) string {
	switch ver {
	case 0:
		names["#k"] = keyItem
		return "attribute_not_exists(#k)"
	case 1:
		names["#k"], names["#v"] = keyItem, attrVer
		values[":ver"] = &types.AttributeValueMemberN{Value: "1"}
		values[":zero"] = &types.AttributeValueMemberN{Value: "0"}
		return "attribute_exists(#k) AND (#v = :ver OR #v = :zero OR attribute_not_exists(#v))"
	}
	names["#v"] = attrVer
	values[":ver"] = &types.AttributeValueMemberN{Value: strconv.FormatUint(ver, 10)}
	return "#v = :ver"
}

// Get implements [fleet.Table].
func (t *Table) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	cctx, cancel := t.callCtx(ctx)
	defer cancel()
	out, err := t.api.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(t.name), Key: itemKey(partition, key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fleet.Item{}, t.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return fleet.Item{Partition: partition, Key: key}, nil
	}
	return t.decode(out.Item)
}

// GetField implements [fleet.Table]: one consistent GetItem whose
// projection is the item's keys, its version and field (billed as a
// GetItem of the whole item).
func (t *Table) GetField(ctx context.Context, partition, key, field string) (fleet.Item, error) {
	cctx, cancel := t.callCtx(ctx)
	defer cancel()
	out, err := t.api.GetItem(cctx, &dynamodb.GetItemInput{
		TableName: aws.String(t.name), Key: itemKey(partition, key), ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#s, #k, #v, #f"),
		ExpressionAttributeNames: map[string]string{"#s": keyStream, "#k": keyItem, "#v": attrVer, "#f": field},
	})
	if err != nil {
		return fleet.Item{}, t.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return fleet.Item{Partition: partition, Key: key}, nil
	}
	switch out.Item[field].(type) {
	case *types.AttributeValueMemberS, *types.AttributeValueMemberN, *types.AttributeValueMemberBOOL:
	default:
		// A map (or another type) of that name: not a scalar attribute,
		// and not decoded (its entries may not be strings).
		if field != keyStream && field != keyItem && field != attrVer {
			delete(out.Item, field)
		}
	}
	return t.decode(out.Item)
}

// Query implements [fleet.Table]: one consistent Query, following its
// pages.
func (t *Table) Query(ctx context.Context, partition string) ([]fleet.Item, error) {
	var items []fleet.Item
	var start map[string]types.AttributeValue
	for {
		cctx, cancel := t.callCtx(ctx)
		out, err := t.api.Query(cctx, &dynamodb.QueryInput{
			TableName:                 aws.String(t.name),
			KeyConditionExpression:    aws.String("#s = :s"),
			ExpressionAttributeNames:  map[string]string{"#s": keyStream},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: partition}},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		cancel()
		if err != nil {
			return nil, t.classify("Query", err)
		}
		for _, m := range out.Items {
			it, err := t.decode(m)
			if err != nil {
				return nil, err
			}
			items = append(items, it)
		}
		if len(out.LastEvaluatedKey) == 0 {
			slices.SortFunc(items, func(a, b fleet.Item) int { return strings.Compare(a.Key, b.Key) })
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}

// Put implements [fleet.Table]: one PutItem, conditional on the version.
func (t *Table) Put(ctx context.Context, it fleet.Item) (fleet.Item, error) {
	names, values := map[string]string{}, map[string]types.AttributeValue{}
	cond := versionCondition(it.Version, names, values)
	ver := it.Version + 1
	if it.Version == 0 {
		// A version the key never had: an item deleted (by hand, or
		// pruned) and written again is not its earlier life.
		ver = fleet.NewVersion(time.Now())
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(t.name), Item: encode(it, ver),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: names}
	if len(values) > 0 {
		in.ExpressionAttributeValues = values
	}
	cctx, cancel := t.callCtx(ctx)
	defer cancel()
	if _, err := t.api.PutItem(cctx, in); err != nil {
		return fleet.Item{}, t.classify("PutItem", err)
	}
	stored := it.Clone()
	stored.Version = ver
	return stored, nil
}

// Delete implements [fleet.Table]: one DeleteItem, conditional on the
// version; a failed condition on an item that is gone is no conflict.
func (t *Table) Delete(ctx context.Context, partition, key string, version uint64) error {
	names, values := map[string]string{}, map[string]types.AttributeValue{}
	cond := versionCondition(version, names, values)
	in := &dynamodb.DeleteItemInput{TableName: aws.String(t.name), Key: itemKey(partition, key),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: names}
	if len(values) > 0 {
		in.ExpressionAttributeValues = values
	}
	cctx, cancel := t.callCtx(ctx)
	_, err := t.api.DeleteItem(cctx, in)
	cancel()
	err = t.classify("DeleteItem", err)
	if errors.Is(err, fleet.ErrConflict) {
		got, gerr := t.Get(ctx, partition, key)
		if gerr == nil && !got.Exists() {
			return nil
		}
	}
	return err
}

// SetEntry implements [fleet.Table]: one UpdateItem that sets (or
// removes) the entry of the map attribute and adds one to the version, on
// condition of the entry's value. When the map attribute (or the item)
// does not exist yet it is created first, empty (one more UpdateItem).
func (t *Table) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	for attempt := 0; ; attempt++ {
		names := map[string]string{"#f": field, "#e": entry, "#v": attrVer}
		// An item this creates starts at a version its key never had.
		values := map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}, ":base": newVersionBase()}
		update := "SET #v = if_not_exists(#v, :base) + :one"
		if value == "" {
			update += " REMOVE #f.#e"
		} else {
			update = "SET #f.#e = :val, #v = if_not_exists(#v, :base) + :one"
			values[":val"] = &types.AttributeValueMemberS{Value: value}
		}
		// An entry present and empty (left so by hand: DynamoDB keeps
		// an empty string) is absent, as MemoryTable has it.
		cond := "attribute_not_exists(#f.#e) OR #f.#e = :old"
		values[":old"] = &types.AttributeValueMemberS{Value: old}
		if old != "" {
			cond = "#f.#e = :old"
		}
		// An entry whose type was changed to Number by hand reads as
		// its digits (decode): the condition takes it as read.
		if number(old) {
			cond += " OR #f.#e = :oldN"
			values[":oldN"] = &types.AttributeValueMemberN{Value: old}
		}
		cctx, cancel := t.callCtx(ctx)
		out, err := t.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(t.name), Key: itemKey(partition, key),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values,
			ReturnValues: types.ReturnValueAllNew,
		})
		cancel()
		if err == nil {
			return t.decode(out.Attributes)
		}
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" && strings.Contains(ae.ErrorMessage(), "document path") {
			if attempt > 0 {
				// The attribute exists, and is no map (edited by hand).
				return fleet.Item{}, &TableError{Table: t.name, Op: "UpdateItem", Permission: permission("UpdateItem"), Kind: ErrBadItem,
					Err: fmt.Errorf("item %s/%s: attribute %s: not a map (%w)", partition, key, field, err)}
			}
			// The map attribute (or the item) does not exist: create it
			// empty, and set the entry again.
			if err := t.createMap(ctx, partition, key, field); err != nil {
				return fleet.Item{}, err
			}
			continue
		}
		return fleet.Item{}, t.classify("UpdateItem", err)
	}
}

// number reports whether s is a number DynamoDB takes as a Number
// attribute: decimal digits, an optional sign, point and exponent, at
// most 38 digits, within its range of magnitudes.
func number(s string) bool {
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	digits := 0
	for _, r := range mantissa {
		if r >= '0' && r <= '9' {
			digits++
		}
	}
	if digits == 0 || digits > 38 || strings.HasPrefix(s, "+") || strings.ContainsAny(s, "_xXpPiInN") {
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	f = math.Abs(f)
	return f == 0 || (f >= 1e-130 && f < 1e126)
}

// newVersionBase is the "ver" of an item an UpdateItem creates, before
// the update adds one: [fleet.NewVersion] less one.
func newVersionBase() types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(fleet.NewVersion(time.Now())-1, 10)}
}

// createMap makes field an empty map attribute of the item, creating the
// item when it does not exist, and changes nothing that exists.
func (t *Table) createMap(ctx context.Context, partition, key, field string) error {
	cctx, cancel := t.callCtx(ctx)
	defer cancel()
	_, err := t.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(t.name), Key: itemKey(partition, key),
		UpdateExpression:          aws.String("SET #f = if_not_exists(#f, :empty), #v = if_not_exists(#v, :base)"),
		ExpressionAttributeNames:  map[string]string{"#f": field, "#v": attrVer},
		ExpressionAttributeValues: map[string]types.AttributeValue{":empty": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, ":base": newVersionBase()},
	})
	return t.classify("UpdateItem", err)
}

// Ensure checks that the table exists with the right key, creating it
// (on-demand billing) and waiting until it is ACTIVE when create allows.
func (t *Table) Ensure(ctx context.Context, create bool) error {
	for {
		cctx, cancel := t.callCtx(ctx)
		out, err := t.api.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.name)})
		cancel()
		var rnf *types.ResourceNotFoundException
		switch {
		case err == nil:
			if out.Table == nil {
				return &TableError{Table: t.name, Op: "DescribeTable", Permission: permission("DescribeTable"), Kind: errors.New("no table description")}
			}
			if err := checkSchema(out.Table); err != nil {
				return &TableError{Table: t.name, Op: "DescribeTable", Permission: permission("DescribeTable"), Kind: ErrTableSchema, Err: err}
			}
			switch st := out.Table.TableStatus; st {
			case types.TableStatusActive, types.TableStatusUpdating:
				return nil
			case types.TableStatusCreating:
				// Wait.
			default:
				// INACCESSIBLE_ENCRYPTION_CREDENTIALS, ARCHIVING,
				// ARCHIVED, DELETING: waiting would be for ever.
				return &TableError{Table: t.name, Op: "DescribeTable", Permission: permission("DescribeTable"), Kind: ErrTableUnusable,
					Err: fmt.Errorf("its status is %s (an inaccessible KMS key, an archive or a deletion): make it ACTIVE again", st)}
			}
		case errors.As(err, &rnf):
			if !create {
				return &TableError{Table: t.name, Op: "DescribeTable", Permission: permission("CreateTable"), Kind: ErrTableMissing}
			}
			if err := t.create(ctx); err != nil {
				return err
			}
		default:
			if err := t.classify("DescribeTable", err); !errors.Is(err, fleet.ErrUnknown) {
				return err
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("dynamo: table %s: waiting until it is ACTIVE: %w", t.name, err)
		}
	}
}

func checkSchema(d *types.TableDescription) error {
	var hash, rng string
	for _, k := range d.KeySchema {
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
	for _, a := range d.AttributeDefinitions {
		if n := aws.ToString(a.AttributeName); (n == keyStream || n == keyItem) && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("its key attribute %q is of type %s, not S", n, a.AttributeType)
		}
	}
	return nil
}

func (t *Table) create(ctx context.Context) error {
	cctx, cancel := t.callCtx(ctx)
	defer cancel()
	_, err := t.api.CreateTable(cctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(t.name),
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
	}
	if err := t.classify("CreateTable", err); !errors.Is(err, fleet.ErrUnknown) {
		return err
	}
	return nil // transient: DescribeTable tells
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
