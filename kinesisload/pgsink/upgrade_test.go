package pgsink

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// schemaV1 is the Schema of the first versions of this Sink (03a8e53 to
// 5a3ae15): no subseq, no epoch.
const schemaV1 = `
CREATE TABLE IF NOT EXISTS tidemark_records (
	stream        text        NOT NULL,
	shard         text        NOT NULL,
	seq           text        NOT NULL,
	partition_key text        NOT NULL,
	data          bytea       NOT NULL,
	arrival       timestamptz NOT NULL,
	loaded_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard, seq)
);
CREATE TABLE IF NOT EXISTS tidemark_checkpoints (
	stream     text        NOT NULL,
	shard      text        NOT NULL,
	position   text        NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// schemaV2 is the Schema of 446b892: subseq, no epoch.
const schemaV2 = `
CREATE TABLE IF NOT EXISTS tidemark_records (
	stream        text        NOT NULL,
	shard         text        NOT NULL,
	seq           text        NOT NULL,
	subseq        bigint      NOT NULL DEFAULT 0,
	partition_key text        NOT NULL,
	data          bytea       NOT NULL,
	arrival       timestamptz NOT NULL,
	loaded_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard, seq, subseq)
);
CREATE TABLE IF NOT EXISTS tidemark_checkpoints (
	stream     text        NOT NULL,
	shard      text        NOT NULL,
	position   text        NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// schemaV3 is the schema before replay_until (a rewind's checkpoint set
// back, RewindCheckpoint).
const schemaV3 = `
CREATE TABLE IF NOT EXISTS tidemark_records (
	stream        text        NOT NULL,
	shard         text        NOT NULL,
	seq           text        NOT NULL,
	subseq        bigint      NOT NULL DEFAULT 0,
	partition_key text        NOT NULL,
	data          bytea       NOT NULL,
	arrival       timestamptz NOT NULL,
	loaded_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard, seq, subseq)
);
CREATE TABLE IF NOT EXISTS tidemark_checkpoints (
	stream         text        NOT NULL,
	shard          text        NOT NULL,
	position       text        NOT NULL,
	epoch          bigint      NOT NULL DEFAULT 0,
	position_epoch bigint      NOT NULL DEFAULT 0,
	updated_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// oldDatabase returns a database whose tables were created by ddl (the
// tables startPostgres created are dropped first), holding what an
// earlier Sink stored of records 0 and 1 of shard0.
func oldDatabase(t *testing.T, ddl string) *pgxpool.Pool {
	t.Helper()
	db := startPostgres(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `DROP TABLE tidemark_records, tidemark_checkpoints`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, ddl); err != nil {
		t.Fatalf("the old DDL: %v", err)
	}
	for i := range 2 {
		r := fleetRecord(i)
		if _, err := db.Exec(ctx, `INSERT INTO tidemark_records (stream, shard, seq, partition_key, data, arrival) VALUES ($1, $2, $3, $4, $5, $6)`,
			streamName, shard0, r.SequenceNumber, r.PartitionKey, r.Data, r.ArrivalTime); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO tidemark_checkpoints (stream, shard, position) VALUES ($1, $2, $3)`,
		streamName, shard0, scan.AfterSequence(seqOf(1)).String()); err != nil {
		t.Fatal(err)
	}
	return db
}

// primaryKey returns the columns of table's primary key, in order.
func primaryKey(t *testing.T, db *pgxpool.Pool, table string) string {
	t.Helper()
	var cols []string
	if err := db.QueryRow(context.Background(), `
		SELECT array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.conrelid = to_regclass($1) AND c.contype = 'p'`, table).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	return strings.Join(cols, ", ")
}

// TestSchemaUpgrade: CreateSchema upgrades the tables of every earlier
// version, twice in a row as well: the rows and the checkpoint are kept
// (sub-sequence 0, epoch 0), subseq joins the records' primary key, and
// the Sink then works on them: a fleet's first batch stores only what
// follows the old checkpoint, and a KPL aggregate gets one row per user
// record.
func TestSchemaUpgrade(t *testing.T) {
	for _, tt := range []struct{ name, ddl string }{{"v1 without subseq and epoch", schemaV1}, {"v2 without epoch", schemaV2}, {"v3 without replay_until", schemaV3}} {
		t.Run(tt.name, func(t *testing.T) {
			db := oldDatabase(t, tt.ddl)
			ctx := context.Background()
			for range 2 {
				if err := CreateSchema(ctx, db); err != nil {
					t.Fatalf("CreateSchema: %v", err)
				}
			}
			if got, want := primaryKey(t, db, "tidemark_records"), "stream, shard, seq, subseq"; got != want {
				t.Errorf("primary key of tidemark_records = (%s), want (%s)", got, want)
			}
			var subseqs []int64
			if err := db.QueryRow(ctx, `SELECT array_agg(subseq ORDER BY seq) FROM tidemark_records`).Scan(&subseqs); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int64{0, 0}, subseqs); diff != "" {
				t.Errorf("subseq of the old rows (-want +got):\n%s", diff)
			}
			checkShard(t, db, shard0, span(0, 1), scan.AfterSequence(seqOf(1)), 0)

			s := testSinkOf(db)
			if err := s.Deliver(ctx, fleetBatch(shard0, 1, 0, 2)); err != nil {
				t.Fatalf("a fleet's first batch: %v", err)
			}
			checkShard(t, db, shard0, span(0, 2), scan.AfterSequence(seqOf(2)), 1)

			agg := kinesisload.Batch{Stream: streamName, ShardID: shard0, Epoch: 1, Checkpoint: scan.AfterSequence(seqOf(3))}
			for i := range 3 {
				r := fleetRecord(3)
				r.SubSequenceNumber, r.Aggregated = int64(i), true
				agg.Records = append(agg.Records, r)
			}
			if err := s.Deliver(ctx, agg); err != nil {
				t.Fatalf("an aggregate: %v", err)
			}
			checkShard(t, db, shard0, append(span(0, 2), "r-003", "r-003", "r-003"), agg.Checkpoint, 1)
		})
	}
}

// TestSchemaUpgradeRefuses: a records table whose key cannot be upgraded
// safely is an error naming the table and the column, and CreateSchema
// changes nothing.
func TestSchemaUpgradeRefuses(t *testing.T) {
	for _, tt := range []struct{ name, ddl string }{
		{"a foreign key refers to the old key", schemaV1 + `
			CREATE TABLE audit (stream text, shard text, seq text, FOREIGN KEY (stream, shard, seq) REFERENCES tidemark_records);`},
		{"another primary key", strings.Replace(schemaV1, "PRIMARY KEY (stream, shard, seq)", "PRIMARY KEY (shard, seq)", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := oldDatabase(t, tt.ddl)
			ctx := context.Background()
			err := CreateSchema(ctx, db)
			if err == nil {
				t.Fatal("CreateSchema = nil, want an error")
			}
			t.Logf("CreateSchema: %v", err)
			for _, name := range []string{"tidemark_records", "subseq"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("CreateSchema = %q, does not name %s", err, name)
				}
			}
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
				WHERE table_name IN ('tidemark_records', 'tidemark_checkpoints') AND column_name IN ('subseq', 'epoch')`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%d of the new columns were added although CreateSchema failed", n)
			}
		})
	}
}
