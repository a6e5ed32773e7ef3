package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/cmd/tidemark/internal/cli"
	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kpl"
)

// leaseTable creates a lease table keyed by key (KCL: leaseKey;
// vmware-go-kcl: ShardID) and writes the items, as those libraries do.
func leaseTable(t *testing.T, db *dynamodb.Client, name, key string, items ...map[string]ddbtypes.AttributeValue) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(key), KeyType: ddbtypes.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Table.TableStatus == ddbtypes.TableStatusActive {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, it := range items {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
}

func s(v string) ddbtypes.AttributeValue     { return &ddbtypes.AttributeValueMemberS{Value: v} }
func n(v int) ddbtypes.AttributeValue        { return &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(v)} }
func ss(v ...string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberSS{Value: v} }

// kcl2Lease is a lease item as KCL 2.x's DynamoDBLeaseSerializer writes
// it (KCL 1.x writes the same names, without the hash keys and child
// shards).
func kcl2Lease(shard, checkpoint string, sub int, parents ...string) map[string]ddbtypes.AttributeValue {
	it := map[string]ddbtypes.AttributeValue{
		"leaseKey": s(shard), "leaseOwner": s("worker-1"), "leaseCounter": n(42), "ownerSwitchesSinceCheckpoint": n(0),
		"checkpoint": s(checkpoint), "checkpointSubSequenceNumber": n(sub),
		"startingHashKey": s("0"), "endingHashKey": s(highKey),
	}
	if len(parents) > 0 {
		it["parentShardId"] = ss(parents...)
	}
	return it
}

// kcl3MultiLease is a lease item of a KCL 3.x multi-stream application
// (DynamoDBMultiStreamLeaseSerializer): leaseKey account:stream:epoch:shard.
func kcl3MultiLease(account, stream string, epoch int64, shard, checkpoint string, sub int) map[string]ddbtypes.AttributeValue {
	id := fmt.Sprintf("%s:%s:%d", account, stream, epoch)
	it := kcl2Lease(id+":"+shard, checkpoint, sub)
	it["streamName"], it["shardId"], it["entityType"], it["throughputKBps"] = s(id), s(shard), s("LEASE"), n(0)
	return it
}

// vmwareLease is a checkpoint item of vmware-go-kcl(-v2)'s
// DynamoCheckpoint; no Checkpoint attribute before its first checkpoint.
func vmwareLease(shard, checkpoint string) map[string]ddbtypes.AttributeValue {
	it := map[string]ddbtypes.AttributeValue{"ShardID": s(shard), "AssignedTo": s("worker-1"), "LeaseTimeout": s("2030-01-01T00:00:00.000000001Z")}
	if checkpoint != "" {
		it["Checkpoint"] = s(checkpoint)
	}
	return it
}

// putAggregate writes a KPL aggregate of the payloads and returns its
// sequence number.
func putAggregate(t *testing.T, kc *kinesis.Client, stream, hashKey string, payloads ...string) string {
	t.Helper()
	var users []kpl.UserRecord
	for _, p := range payloads {
		users = append(users, kpl.UserRecord{PartitionKey: "pk", ExplicitHashKey: hashKey, Data: []byte(p)})
	}
	data, err := kpl.Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kc.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String(stream),
		Records: []types.PutRecordsRequestEntry{{Data: data, PartitionKey: aws.String("pk"), ExplicitHashKey: aws.String(hashKey)}}})
	if err != nil || aws.ToInt32(out.FailedRecordCount) > 0 {
		t.Fatalf("put aggregate: %v %+v", err, out)
	}
	return *out.Records[0].SequenceNumber
}

// import-kcl adopts lease tables in KCL 2.x (single stream, after a
// split), KCL 3.x multi-stream and vmware-go-kcl formats, written by the
// test as those libraries write them, on dynalite, for streams on
// kinesis-local. The dry run writes nothing; --apply writes; then a
// fleet reads on from exactly those positions: nothing skipped, nothing
// repeated but what the sentinels' documented cases repeat (a checkpoint
// inside a KPL aggregate delivers the aggregate's first user records
// again; LATEST is resolved at import time).
func TestImportKCLThenAFleetReadsOnFromExactlyThosePositions(t *testing.T) {
	kin := emulator.Start(t, emulator.KinesisLocal)
	dyn := emulator.Start(t, emulator.Dynalite)
	kc, db := kin.Client, dynamoClient(dyn.Endpoint)
	shard := func(i int) string { return fmt.Sprintf("shardId-%012d", i) }

	// Stream A, read by a KCL 2.x application: one shard, split; KCL
	// finished the parent, checkpointed the low child after its first
	// record, and has not read the high child yet (TRIM_HORIZON).
	newStream(t, kc, "kcl-a", 1)
	putN(t, kc, "kcl-a", lowKey, "a-parent", 3)
	split(t, kc, "kcl-a", shard(0))
	lowChild := putN(t, kc, "kcl-a", lowKey, "a-low", 3)
	putN(t, kc, "kcl-a", highKey, "a-high", 2)
	leaseTable(t, db, "kcl2-leases", "leaseKey",
		kcl2Lease(shard(0), "SHARD_END", 0),
		kcl2Lease(shard(1), lowChild[0], 0, shard(0)),
		kcl2Lease(shard(2), "TRIM_HORIZON", 0, shard(0)))

	// Stream B, a KCL 3.x multi-stream application: shard 0 checkpointed
	// inside a KPL aggregate (user record 1 of 3), shard 1 still at
	// LATEST. The table also holds another stream's lease and a worker's
	// metrics.
	idB := newStream(t, kc, "kcl-b", 2)
	put(t, kc, "kcl-b", lowKey, []byte("b0-plain"))
	agg := putAggregate(t, kc, "kcl-b", lowKey, "b0-u0", "b0-u1", "b0-u2")
	put(t, kc, "kcl-b", lowKey, []byte("b0-after"))
	putN(t, kc, "kcl-b", highKey, "b1-old", 2)
	leaseTable(t, db, "kcl3-leases", "leaseKey",
		kcl3MultiLease("000000000000", "kcl-b", idB.Created.Unix(), shard(0), agg, 1),
		kcl3MultiLease("000000000000", "kcl-b", idB.Created.Unix(), shard(1), "LATEST", 0),
		kcl3MultiLease("000000000000", "another", idB.Created.Unix(), shard(0), "TRIM_HORIZON", 0),
		map[string]ddbtypes.AttributeValue{"leaseKey": s("worker-1"), "entityType": s("WORKER_METRIC_STATS"), "wid": s("worker-1")})

	// Stream C, a vmware-go-kcl application: shard 0 checkpointed after
	// its second record, shard 1 never checkpointed.
	newStream(t, kc, "kcl-c", 2)
	c0 := putN(t, kc, "kcl-c", lowKey, "c0", 3)
	putN(t, kc, "kcl-c", highKey, "c1", 2)
	leaseTable(t, db, "vmware-leases", "ShardID", vmwareLease(shard(0), c0[1]), vmwareLease(shard(1), ""))

	common := []string{"--endpoint", dyn.Endpoint, "--kinesis-endpoint", kin.Endpoint, "--table", "fleet"}
	runs := []struct {
		stream, leases string
		extra          []string
	}{
		{"kcl-a", "kcl2-leases", nil},
		{"kcl-b", "kcl3-leases", nil},
		{"kcl-c", "vmware-leases", []string{"--initial-position", "TRIM_HORIZON"}},
	}
	// The dry run prints the plan and writes nothing (not even the
	// table).
	for _, r := range runs {
		args := append([]string{"import-kcl", "--kcl-table", r.leases, "--stream", r.stream, "--create-table"}, append(common, r.extra...)...)
		code, out, _ := tidemark(t, args...)
		if code != cli.ExitOK || !strings.Contains(out, "Dry run: nothing written") {
			t.Fatalf("dry run of %s = %d:\n%s", r.stream, code, out)
		}
	}
	if code, _, errOut := tidemark(t, "export", "--table", "fleet", "--stream", "kcl-a", "--endpoint", dyn.Endpoint); code != cli.ExitFailed || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("the table after the dry runs: export = %d, %q; want nothing there", code, errOut)
	}
	// vmware's shard with no checkpoint needs the application's initial
	// position: refused without it, naming the shard.
	if code, _, errOut := tidemark(t, append([]string{"import-kcl", "--kcl-table", "vmware-leases", "--stream", "kcl-c"}, common...)...); code != cli.ExitFailed || !strings.Contains(errOut, shard(1)) {
		t.Errorf("vmware import without --initial-position = %d, %q", code, errOut)
	}
	for _, r := range runs {
		args := append([]string{"import-kcl", "--kcl-table", r.leases, "--stream", r.stream, "--apply", "--create-table"}, append(common, r.extra...)...)
		code, out, _ := tidemark(t, args...)
		if code != cli.ExitOK || !strings.Contains(out, "Imported") {
			t.Fatalf("import of %s = %d:\n%s", r.stream, code, out)
		}
		if r.stream == "kcl-b" && !strings.Contains(out, "WARNING: shard(s) "+shard(1)+" were at LATEST") {
			t.Errorf("the import of kcl-b does not warn about the LATEST shard by name:\n%s", out)
		}
	}

	// A fleet reads on. Each shard gets one more record after the import:
	// whatever the fleet delivers of a shard comes before it.
	recs := map[string]*recorder{}
	for i, stream := range []string{"kcl-a", "kcl-b", "kcl-c"} {
		recs[stream] = &recorder{}
		c := coordinator(t, dyn.Endpoint, "fleet", fmt.Sprintf("host-%d", i), 2*time.Second)
		startLoader(t, kinesisload.Config{Stream: stream, Sink: recs[stream]}, kinesisload.WithClient(kc), kinesisload.WithCoordinator(c))
	}
	put(t, kc, "kcl-a", lowKey, []byte("a-low-new"))
	put(t, kc, "kcl-a", highKey, []byte("a-high-new"))
	put(t, kc, "kcl-b", lowKey, []byte("b0-new"))
	put(t, kc, "kcl-b", highKey, []byte("b1-new"))
	put(t, kc, "kcl-c", lowKey, []byte("c0-new"))
	put(t, kc, "kcl-c", highKey, []byte("c1-new"))
	want := map[string][]string{
		// The parent was finished by KCL; the low child resumes after
		// its first record; the high child from its start.
		"kcl-a": {"a-low-2", "a-low-3", "a-low-new", "a-high-1", "a-high-2", "a-high-new"},
		// The aggregate again (its first two user records were
		// processed by KCL: the documented repeat), the records after
		// it; shard 1's LATEST was resolved at the import: only what
		// came after.
		"kcl-b": {"b0-u0", "b0-u1", "b0-u2", "b0-after", "b0-new", "b1-new"},
		// After vmware's checkpoint; shard 1 from TRIM_HORIZON.
		"kcl-c": {"c0-3", "c0-new", "c1-1", "c1-2", "c1-new"},
	}
	for stream, w := range want {
		got := recs[stream].waitFor(t, 25*time.Second, w...)
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("stream %s: the fleet delivered %v, want exactly %v", stream, got, w)
		}
	}
}
