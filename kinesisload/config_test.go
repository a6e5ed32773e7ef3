package kinesisload

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

func TestNewRefusesInvalidConfig(t *testing.T) {
	sink := newRecorder()
	ok := Config{Stream: "orders", Sink: sink, Dir: "/tmp/x"}
	tests := []struct {
		name    string
		mutate  func(*Config)
		opts    []Option
		wantSub string
	}{
		{"no stream", func(c *Config) { c.Stream = "" }, nil, `Stream = "": a stream name is required`},
		{"long stream", func(c *Config) { c.Stream = strings.Repeat("s", 129) }, nil, "Stream = sss"},
		{"no sink", func(c *Config) { c.Sink = nil }, nil, "Sink = <nil>"},
		{"no dir", func(c *Config) { c.Dir = "" }, nil, `Dir = "": a journal directory is required`},
		{"idle too short", func(c *Config) { c.IdleWait = 10 * time.Millisecond }, nil, "IdleWait = 10ms"},
		{"limit too large", func(c *Config) { c.RecordsPerCall = 10001 }, nil, "RecordsPerCall = 10001"},
		{"negative retries", func(c *Config) { c.SinkRetries = -3 }, nil, "SinkRetries = -3"},
		{"negative Kinesis attempts", func(c *Config) { c.KinesisMaxAttempts = -1 }, nil, "KinesisMaxAttempts = -1"},
		{"Kinesis backoff above its cap", func(c *Config) { c.KinesisBackoff, c.KinesisMaxBackoff = time.Minute, time.Second }, nil, "KinesisMaxBackoff = 1s"},
		{"Sink backoff above its cap", func(c *Config) { c.SinkBackoff, c.SinkMaxBackoff = time.Minute, time.Second }, nil, "SinkMaxBackoff = 1s"},
		{"negative timeout", func(c *Config) { c.CallTimeout = -time.Second }, nil, "CallTimeout = -1s"},
		{"negative interval", func(c *Config) { c.ListShardsInterval = -time.Second }, nil, "ListShardsInterval = -1s"},
		{"shard end start", func(c *Config) { c.StartPosition = scan.ShardEnd() }, nil, "StartPosition = SHARD_END"},
		{"bad start", func(c *Config) { c.StartPosition = scan.AfterSequence("12x") }, nil, `"12x" is not decimal digits`},
		{"bad shard start", func(c *Config) { c.Shards = map[string]scan.Position{"shardId-7": scan.AfterSequence("7x")} }, nil, "Shards[shardId-7] = AFTER_SEQUENCE_NUMBER:7x"},
		{"empty shard id", func(c *Config) { c.Shards = map[string]scan.Position{"": {}} }, nil, `Shards = "": empty shard ID`},
		{"empty selection", func(c *Config) { c.Shards = map[string]scan.Position{} }, nil, "Shards = map[]: an empty selection reads nothing"},
		{"unknown recreated policy", func(c *Config) { c.OnStreamRecreated = 7 }, nil, "OnStreamRecreated = StreamRecreated(7)"},
		{"nil option", func(c *Config) {}, []Option{nil}, "a nil Option"},
		{"useless hook", func(c *Config) {}, []Option{WithHooks(42)}, "WithHooks argument 0 (int)"},
	}
	for _, tt := range tests {
		cfg := ok
		tt.mutate(&cfg)
		_, err := New(cfg, tt.opts...)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantSub) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig containing %q", tt.name, err, tt.wantSub)
		}
	}
	if _, err := New(ok); err != nil {
		t.Errorf("New(valid) = %v", err)
	}
	noDir := ok
	noDir.Dir = ""
	if _, err := New(noDir, WithStore(memStore(t, journal.NewMemory()))); err != nil {
		t.Errorf("New without Dir but WithStore = %v", err)
	}
}

// Run refuses a selection that names a shard the stream does not have,
// rather than reading nothing.
func TestRunRefusesUnknownSelectedShard(t *testing.T) {
	s := newFakeStream(t, 1)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder(), Shards: map[string]scan.Position{"shardId-000000000042": {}}},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Shards[shardId-000000000042]") {
		t.Fatalf("Run = %v, want ErrInvalidConfig naming the shard", err)
	}
}

// Run refuses an AT_TIMESTAMP start later than Kinesis's clock, naming the
// field, before anything is stored: Kinesis would refuse every iterator at
// it, and each shard's first read stopped Run with InvalidArgumentException.
// A start in the past, or a second ahead (the Date's floor), is accepted.
func TestFutureAtTimestampIsRefused(t *testing.T) {
	s := newFakeStream(t, 2)
	for _, tt := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"StartPosition", Config{StartPosition: scan.AtTimestamp(time.Now().Add(time.Hour))}, "StartPosition"},
		{"Shards", Config{Shards: map[string]scan.Position{shard1: scan.AtTimestamp(time.Now().Add(time.Minute)), shard0: {}}}, "Shards[" + shard1 + "]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Stream, cfg.Sink = s.name, newRecorder()
			j := journal.NewMemory()
			err := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, j))).wait(t)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field+" = AT_TIMESTAMP") {
				t.Fatalf("Run = %v, want ErrInvalidConfig naming %s", err, tt.field)
			}
			if n := journalLen(t, j); n != 0 {
				t.Fatalf("the journal holds %d records after the refusal, want none", n)
			}
		})
	}
	rec := newRecorder()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.AtTimestamp(time.Now().Add(-time.Minute))},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)))
	s.put(shard0, "after")
	rec.waitFor(t, "after")
}

// journalLen counts the records (and snapshot) j replays.
func journalLen(t *testing.T, j journal.Journal) int {
	t.Helper()
	n := 0
	if err := j.Replay(context.Background(), func(journal.Entry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Config literal that sets only what is required behaves exactly as
// DefaultConfig: every zero field means its default (SinkRetries 0 too:
// retry without limit; SinkNoRetries says "no retry"). Checked field by
// field, so a field added later with a zero that means something else
// fails here.
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	lit := Config{}.withDefaults()
	def := DefaultConfig().withDefaults()
	lv, dv := reflect.ValueOf(lit), reflect.ValueOf(def)
	for i := range lv.NumField() {
		name := lv.Type().Field(i).Name
		if !reflect.DeepEqual(lv.Field(i).Interface(), dv.Field(i).Interface()) {
			t.Errorf("Config{}.%s = %v after defaults, DefaultConfig().%s = %v", name, lv.Field(i).Interface(), name, dv.Field(i).Interface())
		}
	}
	if def.SinkRetries != SinkRetriesForever {
		t.Errorf("the default SinkRetries = %d, want SinkRetriesForever", def.SinkRetries)
	}
}
