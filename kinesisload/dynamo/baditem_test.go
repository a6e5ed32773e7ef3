package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"

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
