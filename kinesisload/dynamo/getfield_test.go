package dynamo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/internal/emulator"
)

// GetField on items as other writers leave them: without "ver" (the
// earlier version), the field a number, a reserved word as the field's
// name, and a map of that name whose entries are not strings (edited by
// hand): the answer is the version and the scalar alone, never an error
// for an attribute not asked for as a scalar.
func TestGetFieldOnItemsOfOtherWritersAnswersTheScalarAlone(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	api := newClient(e.Endpoint, newFaults())
	table := fmt.Sprintf("tidemark-getfield-%d", tableSeq.Add(1))
	tb := NewTable(api, table, 10*time.Second)
	if err := tb.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("p"), keyItem: sv("old"), "c": nv(42), "size": sv("s"),
		"pos": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": sv("1")}}})
	got, err := tb.GetField(ctx, "p", "old", "c")
	if err != nil || got.Version != 1 || got.Field("c") != "42" || len(got.Fields) != 1 || len(got.Maps) != 0 {
		t.Errorf("GetField c of an item without ver = %+v, %v; want version 1, c = 42 alone", got, err)
	}
	got, err = tb.GetField(ctx, "p", "old", "size") // a reserved word
	if err != nil || got.Field("size") != "s" || len(got.Fields) != 1 {
		t.Errorf("GetField size = %+v, %v; want size = s alone", got, err)
	}
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("p"), keyItem: sv("edited"), "ver": nv(3),
		"c": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberBOOL{Value: true}}}})
	got, err = tb.GetField(ctx, "p", "edited", "c")
	if err != nil || got.Version != 3 || len(got.Fields) != 0 || len(got.Maps) != 0 {
		t.Errorf("GetField c where c is a map of booleans = %+v, %v; want version 3 and nothing else (not a scalar attribute)", got, err)
	}
}
