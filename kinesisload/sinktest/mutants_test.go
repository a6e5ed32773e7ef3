package sinktest

import (
	"context"
	"slices"
	"testing"
	"time"
)

// runCases runs every case of the suite on a fresh Memory with flaws and
// returns the names of the cases that failed, with their errors.
func runCases(t *testing.T, flaws flaw) map[string]error {
	t.Helper()
	failed := map[string]error{}
	for _, c := range cases {
		m := NewMemory()
		m.flaws = flaws
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := c.run(ctx, m.Harness()); err != nil {
			failed[c.name] = err
		}
		cancel()
	}
	return failed
}

// Each case of the suite fails for a Memory that breaks the rule it checks:
// a suite that passes a broken Sink proves nothing. Every mutant must fail
// at least the cases named (it may fail others too), and every case of
// the suite is named for some mutant.
func TestSuiteCatchesMutants(t *testing.T) {
	mutants := []struct {
		name string
		f    flaw
		fail []string // cases that must fail
	}{
		{"no check (a)", flawNoA, []string{"StartBatch", "Redelivery", "ShardEnd"}},
		{"(a) only for a checkpoint behind", flawAOnlyPast, []string{"Redelivery", "Aggregated"}},
		{"(a) raises the one epoch", flawARaisesEpoch, []string{"NewOwnerLagging"}},
		{"no check (b)", flawNoB, []string{"LowerEpochRefused", "ZombieAfterNoOp"}},
		{"(b) without ErrLeaseLost", flawBNotLeaseLost, []string{"LowerEpochRefused", "ZombieAfterNoOp"}},
		{"(c) stores the overlap", flawCStoresAll, []string{"NewOwnerOverlap", "NewOwnerLagging", "ZombieAfterNoOp", "Aggregated", "MultiNewOwner"}},
		{"(c) refuses the overlap", flawCAsD, []string{"NewOwnerOverlap", "NewOwnerLagging", "Aggregated", "Checkpoints"}},
		{"record at the checkpoint kept", flawCKeepsAtCheckpoint, []string{"NewOwnerOverlap", "SameEpochOverlap"}},
		{"no check (d)", flawNoD, []string{"SameEpochOverlap"}},
		{"no checkpoint without records", flawNoEmpty, []string{"StartBatch", "SingleProcess", "ShardEnd", "Checkpoints"}},
		{"keyed by sequence number", flawSeqKey, []string{"Aggregated"}},
		{"Checkpoints of every stream", flawAllStreams, []string{"Checkpoints"}},
		{"no lock", flawNoLock, []string{"ConcurrentZombie", "MultiConcurrentZombie"}},
		{"AT_SEQUENCE_NUMBER taken for AFTER", flawAtAsAfter, []string{"StartPositions"}},
		{"sequence numbers compared as text", flawTextSeq, []string{"SequenceLength"}},
		{"no lock of a missing row", flawNoRowLock, []string{"ConcurrentFirstBatch"}},
		{"no epoch stored without records", flawEmptyNoEpoch, []string{"StartOverGeneration"}},
		{"(d) not permanent", flawDNotPermanent, []string{"SameEpochOverlap", "SequenceLength", "MultiAllOrNothing"}},
		{"DeliverMulti stores only the first checkpoint", flawMultiFirstCheckpointOnly, []string{"MultiStoresAll"}},
		{"DeliverMulti a transaction per batch", flawMultiOneByOne, []string{"MultiFencedShard", "MultiAllOrNothing"}},
		{"DeliverMulti stores the others around a fence", flawMultiStoresAroundFence, []string{"MultiFencedShard"}},
		{"DeliverMulti names every shard fenced", flawMultiFencesAll, []string{"MultiFencedShard"}},
		{"DeliverMulti's fence names no shard", flawMultiUnnamedFence, []string{"MultiFencedShard"}},
		{"sequence numbers compared as float64", flawFloatSeq, []string{"RealSequenceNumbers"}},
		{"RewindCheckpoint does nothing", flawRewindNoop, []string{"Rewind"}},
		{"RewindCheckpoint keeps the stored epoch", flawRewindKeepsEpoch, []string{"Rewind"}},
	}
	covered := map[string]bool{}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			// A race is not lost every time: a concurrent case gets a
			// few runs to fail.
			failed := runCases(t, m.f)
			for range 9 {
				if !slices.ContainsFunc(m.fail, func(name string) bool { return failed[name] == nil }) {
					break
				}
				for name, err := range runCases(t, m.f) {
					failed[name] = err
				}
			}
			for _, name := range m.fail {
				covered[name] = true
				if failed[name] == nil {
					t.Errorf("case %s passes a Memory that breaks the rule (%s)", name, m.name)
				}
			}
			for name, err := range failed {
				if !slices.Contains(m.fail, name) {
					t.Logf("case %s also fails: %v", name, err)
				}
			}
		})
	}
	for _, c := range cases {
		if !covered[c.name] {
			t.Errorf("case %s fails for no mutant", c.name)
		}
	}
}

// The unbroken Memory passes every case, through the same runner as the
// mutants: a mutant fails because of its flaw.
func TestSuiteRunnerPassesMemory(t *testing.T) {
	for name, err := range runCases(t, 0) {
		t.Errorf("case %s: %v", name, err)
	}
}
