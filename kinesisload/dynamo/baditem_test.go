package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/internal/emulator"
)

// TestBadItemStopsTheHostWithAClearError: a shard item that cannot be
// decoded (edited by hand, or written by an incompatible version) is not
// a transient error to retry forever, leaving a host that silently reads
// nothing: Acquire returns an error wrapping ErrBadItem that names the
// table and the shard.
func TestBadItemStopsTheHostWithAClearError(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	m, err := h.host("a").c.Join(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Leave(ctx) }()
	const shard = "shardId-000000000007"
	if _, err := newClient(e.Endpoint, newFaults()).PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(h.table),
		Item: map[string]types.AttributeValue{
			keyStream: &types.AttributeValueMemberS{Value: "orders"}, keyItem: &types.AttributeValueMemberS{Value: "shard#" + shard},
			"ver": &types.AttributeValueMemberN{Value: "1.5"}, "epoch": &types.AttributeValueMemberN{Value: "1"}, "prog": &types.AttributeValueMemberS{Value: "{}"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	h.Advance(h.cfg.LeaseDuration)
	_, err = m.Acquire(ctx, []string{shard})
	if !errors.Is(err, ErrBadItem) {
		t.Fatalf("Acquire = %v, want an error wrapping ErrBadItem", err)
	}
	if te, ok := errors.AsType[*TableError](err); !ok || te.Table != h.table {
		t.Errorf("Acquire = %v, want a *TableError naming table %s", err, h.table)
	}
	if !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "ver") {
		t.Errorf("the error %q does not name the shard and the attribute", err)
	}
}

// The roster's map of beats turned into another type by hand (a console
// edit) stops the host with an error wrapping ErrBadItem that names the
// item and the attribute, as every item that cannot be decoded does: it
// was a bare ValidationException naming neither.
func TestARosterWhoseBeatsAreNoMapStopsTheHostNamingIt(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	m, err := h.host("a").c.Join(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Leave(ctx) }()
	h.Advance(time.Second)
	if _, err := newClient(e.Endpoint, newFaults()).UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(h.table), Key: itemKey("orders", "roster"),
		UpdateExpression:          aws.String("SET #b = :s"),
		ExpressionAttributeNames:  map[string]string{"#b": "beats"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "{}"}},
	}); err != nil {
		t.Fatal(err)
	}
	h.Advance(2 * time.Second)
	_, err = m.Acquire(ctx, []string{"shardId-000000000000"})
	if !errors.Is(err, ErrBadItem) || !strings.Contains(err.Error(), "roster") || !strings.Contains(err.Error(), "beats") {
		t.Fatalf("Acquire = %v, want an error wrapping ErrBadItem naming item roster and attribute beats", err)
	}
}

// statusAPI answers DescribeTable with the table's description but
// another status.
type statusAPI struct {
	API
	status types.TableStatus
}

func (a statusAPI) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	out, err := a.API.DescribeTable(ctx, in, o...)
	if err == nil && out.Table != nil {
		out.Table.TableStatus = a.status
	}
	return out, err
}

// A table in a status it never leaves by itself (its KMS key disabled,
// archived) stops Join at once with ErrTableUnusable naming the status:
// Join waited for ever, silently, for it to become ACTIVE.
func TestJoinOnATableThatCannotBecomeActiveNamesItsStatus(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	client := newClient(e.Endpoint, newFaults())
	name := fmt.Sprintf("tidemark-status-%d", tableSeq.Add(1))
	if err := NewTable(client, name, 10*time.Second).Ensure(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for _, st := range []types.TableStatus{types.TableStatusInaccessibleEncryptionCredentials, types.TableStatusArchived} {
		c, err := New(statusAPI{client, st}, Config{Table: name, HostID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		m, err := c.Join(ctx, "orders")
		cancel()
		if m != nil {
			_ = m.Leave(context.Background())
		}
		if !errors.Is(err, ErrTableUnusable) || !strings.Contains(err.Error(), string(st)) {
			t.Errorf("status %s: Join = %v, want ErrTableUnusable naming the status", st, err)
		}
	}
}
