package sim

import (
	"maps"
	"testing"
)

// failureKind keeps what an oracle found and drops times and records, so
// that a shrunk schedule must fail the same way, not merely fail.
func TestFailureKindNamesTheOracleNotTheRecords(t *testing.T) {
	for in, want := range map[string]string{
		"at 352.149s: LOSS or no liveness: required records not delivered 5m0s after the faults healed: g2-r66 (shardId-0 49/0 at 27.358s);":                               "LOSS or no liveness: required records not delivered",
		"at 1.0s: LOSS or no liveness: required records not delivered 4m0s after the faults healed: (the start-up was never durable) ( /0 at 0.000s);":                     "LOSS or no liveness: the start-up was never durable",
		"at 9.5s: LOSS or no liveness: required records not delivered 5m0s after the faults healed: g0-r2 (not delivered again after rewind-1) (shardId-0 4/0 at 0.785s);": "LOSS or no liveness: not delivered again after a rewind",
		"at 12.000s: exactly once: g0-r7 stored 2 times: a; b": "exactly once",
		"at 80.405s: h0.3: Run stopped: kinesisload: stream sim: loading the stream's identity: fleet: stream sim: the identity item names generation 0, the session is of 1": "Run stopped: the identity item names generation 0, the session is of 1",
	} {
		if got := failureKind(Result{Failures: []string{in}}); got != want {
			t.Errorf("failureKind(%q) = %q, want %q", in, got, want)
		}
	}
	if got := failureKind(Result{}); got != "" {
		t.Errorf("failureKind of a pass = %q, want empty", got)
	}
}

// -sim.drop and -sim.keep take the indexes -sim.shrink prints, and refuse
// anything else naming it.
func TestParseDropReadsIndexes(t *testing.T) {
	got, err := parseDrop(" 3,0, 17 ,")
	if want := map[int]bool{0: true, 3: true, 17: true}; err != nil || !maps.Equal(got, want) {
		t.Errorf("parseDrop = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"x", "-1", "2,3.5"} {
		if _, err := parseDrop(bad); err == nil {
			t.Errorf("parseDrop(%q) accepted it", bad)
		}
	}
}
