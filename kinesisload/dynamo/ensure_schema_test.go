package dynamo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/internal/emulator"
)

// A table whose key has the right names but another type (stream N) is
// refused by Ensure with ErrTableSchema, as its documentation says ("the
// table's key is not stream (S) + item (S)"): it was taken, and every
// later call failed with a bare ValidationException naming no key (found
// by a review).
func TestEnsureRefusesAKeyOfAnotherType(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	api := newClient(e.Endpoint, newFaults())
	name := fmt.Sprintf("tidemark-keytype-%d", tableSeq.Add(1))
	if _, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(keyStream), AttributeType: types.ScalarAttributeTypeN},
			{AttributeName: aws.String(keyItem), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(keyStream), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(keyItem), KeyType: types.KeyTypeRange},
		},
	}); err != nil {
		t.Fatal(err)
	}
	tb := NewTable(api, name, 10*time.Second)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := tb.Ensure(cctx, false); !errors.Is(err, ErrTableSchema) {
		_, gerr := tb.Get(ctx, "orders", "roster")
		t.Fatalf("Ensure on a table keyed stream (N) + item (S) = %v, want ErrTableSchema (a Get then fails with %v)", err, gerr)
	}
}
