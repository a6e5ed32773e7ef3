package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
	"github.com/tidemark/tidemark/scan"
)

// printTable shows what the fleet's table holds: T0, each shard's owner,
// epoch and the position its owner committed last, and the roster: each
// host's heartbeat counter, its changes, whether it left, and the load it
// published only when the hosts balance by throughput.
func TestPrintTableShowsTheRoster(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	info := dynamo.StreamInfo{
		Identity:    kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:000000000000:stream/orders", Created: t0.Add(-time.Hour)},
		Initialised: true, InitLockOwner: "host-a", StartTime: t0,
		Shards: map[string]dynamo.ShardInfo{
			"shardId-000000000000": {Owner: "host-a", Epoch: 3, Progress: kinesisload.ShardProgress{State: kinesisload.StateActive,
				Position: scan.AfterSequence("49000000000000000000000000000000000000000000000000000042")}},
		},
		Hosts: map[string]dynamo.HostInfo{
			"host-a": {Counter: 120, Changes: 7},
			"host-b": {Counter: 95, Changes: 2, Left: true},
		},
	}
	var out bytes.Buffer
	printTable(&printer{w: &out}, info)
	got := out.String()
	t.Logf("\n%s", got)
	for _, re := range []string{
		`LATEST resolved at T0 2026-12-01 09:30:00\.000`,
		`(?m)^\s+shardId-000000000000\s+host-a\s+3\s+-\s+ACTIVE\s+AFTER_SEQUENCE_NUMBER:…000000000042\s+-$`,
		`(?m)^\s+HOST\s+HEARTBEAT\s+CHANGES\s+LEFT$`,
		`(?m)^\s+host-a\s+120\s+7\s+false$`,
		`(?m)^\s+host-b\s+95\s+2\s+true$`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("the table does not match %q", re)
		}
	}
	if strings.Contains(got, "LOAD") {
		t.Error("a LOAD column without any load published")
	}

	info.Hosts["host-a"] = dynamo.HostInfo{Counter: 121, Changes: 7, Load: 2097152}
	out.Reset()
	printTable(&printer{w: &out}, info)
	got = out.String()
	for _, re := range []string{
		`(?m)^\s+HOST\s+HEARTBEAT\s+CHANGES\s+LEFT\s+LOAD \(B/s\)$`,
		`(?m)^\s+host-a\s+121\s+7\s+false\s+2097152$`,
		`(?m)^\s+host-b\s+95\s+2\s+true\s+0$`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("balancing by throughput, the table does not match %q:\n%s", re, got)
		}
	}
}
