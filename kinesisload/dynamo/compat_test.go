package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// oldItem writes an item as the coordinator before the fleet core wrote
// it (attribute names and types of its encode functions).
func oldItem(t *testing.T, api API, table string, attrs map[string]types.AttributeValue) {
	t.Helper()
	if _, err := api.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: attrs}); err != nil {
		t.Fatal(err)
	}
}

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func nv(v uint64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }

// A table written by the version before the fleet core (shard items with
// their epochs, owners and committed positions, the committed
// initialisation, the identity item without a version, heartbeat items)
// is read as it is: the new hosts resume every shard where the old fleet
// committed it, above its epochs, with nothing to migrate.
func TestTableOfThePreviousVersionIsReadAsItIs(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	api := newClient(e.Endpoint, newFaults())
	table := fmt.Sprintf("tidemark-compat-%d", tableSeq.Add(1))
	if err := NewTable(api, table, 10*time.Second).Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("identity"),
		"arn": sv("arn:aws:kinesis:us-east-1:000000000000:stream/orders"), "created": sv(created.Format(time.RFC3339Nano))})
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("init"),
		"ver": nv(3), "lockOwner": sv("old-host"), "lockToken": sv("tok"), "committed": sv("tok"), "t0": sv(created.Add(time.Hour).Format(time.RFC3339Nano))})
	want := map[string]scan.Position{}
	for i, seq := range []string{"49000000000000000000000000000000000100000000000000000000", "49000000000000000000000000000000000200000000000000000001"} {
		id := fmt.Sprintf("shardId-00000000000%d", i)
		prog, _ := json.Marshal(kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.AfterSequence(seq)})
		pend, _ := json.Marshal(kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
		oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("shard#" + id),
			"ver": nv(7), "epoch": nv(5), "owner": sv("old-host"), "prog": sv(string(prog)),
			"pend": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"tok": sv(string(pend))}}})
		want[id] = scan.AfterSequence(seq)
	}
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("host#old-host"),
		"counter": nv(900), "left": &types.AttributeValueMemberBOOL{Value: true}})

	c, err := New(api, Config{Table: table, HostID: "new-host", LeaseDuration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Leave(ctx) }()
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		id, err := st.Identity(ctx, "orders")
		if err != nil || id.Created != created {
			return fmt.Errorf("the old identity item reads %v, %v", id, err)
		}
		got, err := st.Load(ctx, "orders")
		if err != nil {
			return err
		}
		for shard, pos := range want {
			if !got[shard].Position.Equal(pos) || got[shard].State != kinesisload.StateActive {
				return fmt.Errorf("shard %s loads as %+v, want ACTIVE at %v", shard, got[shard], pos)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("Initialise on the old table: %v", err)
	}
	// The old host left: its shards are free for the new one (after the
	// lease duration, as for any host not seen since), above epoch 5.
	held := map[string]kinesisload.Lease{}
	for deadline := time.Now().Add(30 * time.Second); len(held) < 2; {
		ls, err := m.Acquire(ctx, []string{"shardId-000000000000", "shardId-000000000001"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			held[l.Shard()] = l
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new host took %d of the old fleet's 2 shards", len(held))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for id, l := range held {
		if l.Epoch() <= 5 {
			t.Errorf("%s taken at epoch %d, want above the old fleet's 5", id, l.Epoch())
		}
		if got := l.Progress().Position; !got.Equal(want[id]) {
			t.Errorf("%s resumes at %v, want the old fleet's %v", id, got, want[id])
		}
	}
}

// An item whose "ver" an operator set to 0 by hand is read at version 1,
// as one without a "ver", and written over: every conditional write on it
// was refused (its condition wanted 1 or none), so a shard item so edited
// was never taken again and its owner's commits retried for ever.
func TestAnItemWhoseVerWasSetToZeroByHandIsWrittenAgain(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	api := newClient(e.Endpoint, newFaults())
	table := fmt.Sprintf("tidemark-ver0-%d", tableSeq.Add(1))
	tb := NewTable(api, table, 10*time.Second)
	if err := tb.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("shard#shardId-000000000000"),
		"ver": nv(0), "epoch": nv(5), "owner": sv("h1")})
	it, err := tb.Get(ctx, "orders", "shard#shardId-000000000000")
	if err != nil {
		t.Fatal(err)
	}
	if it.Version != 1 {
		t.Fatalf("read at version %d, want 1", it.Version)
	}
	it.Fields["owner"] = "h2"
	stored, err := tb.Put(ctx, it)
	if err != nil {
		t.Fatalf("Put at the version read: %v", err)
	}
	if stored.Version != 2 || stored.Fields["owner"] != "h2" {
		t.Fatalf("stored %+v, want owner h2 at version 2", stored)
	}
}

// A roster entry whose type an operator changed to Number (a console
// offers it) is read as its digits and written over by a SetEntry from
// what was read: its condition compared a String only, so the host's
// every heartbeat was refused and it fenced itself, again after each
// restart, until the entry was mended by hand.
func TestAnEntryTurnedIntoANumberByHandIsWrittenOver(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	api := newClient(e.Endpoint, newFaults())
	table := fmt.Sprintf("tidemark-entryn-%d", tableSeq.Add(1))
	tb := NewTable(api, table, 10*time.Second)
	if err := tb.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	oldItem(t, api, table, map[string]types.AttributeValue{keyStream: sv("orders"), keyItem: sv("roster"),
		"ver": nv(3), "beats": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"h1": nv(12), "h2": sv("c=4")}}})
	it, err := tb.Get(ctx, "orders", "roster")
	if err != nil {
		t.Fatal(err)
	}
	was := it.Maps["beats"]["h1"]
	if was != "12" {
		t.Fatalf("the entry reads as %q, want its digits 12", was)
	}
	stored, err := tb.SetEntry(ctx, "orders", "roster", "beats", "h1", was, "c=13")
	if err != nil {
		t.Fatalf("SetEntry from the entry read: %v", err)
	}
	if got := stored.Maps["beats"]; got["h1"] != "c=13" || got["h2"] != "c=4" {
		t.Fatalf("after SetEntry the entries are %v, want h1 c=13 and h2 c=4", got)
	}
	if _, err := tb.SetEntry(ctx, "orders", "roster", "beats", "h2", "4", "c=5"); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("SetEntry from 4 over the string entry c=4 = %v, want ErrConflict", err)
	}
}

// number takes what DynamoDB accepts as a Number, and nothing a roster
// entry's condition would send it to be refused as invalid.
func TestNumberTakesOnlyWhatDynamoDBTakesAsANumber(t *testing.T) {
	for s, want := range map[string]bool{
		"12": true, "-0.5": true, "1.5E+3": true, "0": true, "1e125": true,
		"": false, "c=12": false, "12x": false, "+1": false, "NaN": false, "Inf": false, "0x1p-2": false,
		"1e126": false, "1e-131": false, "123456789012345678901234567890123456789": false, "1_000": false,
	} {
		if got := number(s); got != want {
			t.Errorf("number(%q) = %v, want %v", s, got, want)
		}
	}
}
