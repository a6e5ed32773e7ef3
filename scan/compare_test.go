package scan_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/scan"
)

func TestCompare(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	// In progress order; equal neighbours are marked.
	order := []scan.Position{
		scan.TrimHorizon(),
		scan.AtTimestamp(t0),
		scan.AtTimestamp(t0.Add(time.Millisecond)),
		scan.AtSequence("9"),
		scan.AfterSequence("9"),
		scan.AtSequence("10"),
		scan.AfterSequence("10"),
		scan.AfterSequence("49590338271490256608559692538361571095921575989136588898"),
		scan.ShardEnd(),
	}
	for i, a := range order {
		for j, b := range order {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			got, err := scan.Compare(a, b)
			if err != nil || got != want {
				t.Errorf("Compare(%v, %v) = %d, %v; want %d", a, b, got, err, want)
			}
		}
	}
	if c, err := scan.Compare(scan.AfterSequence("0010"), scan.AfterSequence("10")); c != 0 || err != nil {
		t.Errorf("leading zeros: Compare = %d, %v; want 0", c, err)
	}
	for _, bad := range []scan.Position{scan.Latest(), {}, {Kind: scan.KindAfterSequence, Sequence: "x"}} {
		if _, err := scan.Compare(bad, scan.ShardEnd()); !errors.Is(err, scan.ErrInvalidPosition) {
			t.Errorf("Compare(%v, SHARD_END) error = %v, want ErrInvalidPosition", bad, err)
		}
		if _, err := scan.Compare(scan.TrimHorizon(), bad); !errors.Is(err, scan.ErrInvalidPosition) {
			t.Errorf("Compare(TRIM_HORIZON, %v) error = %v, want ErrInvalidPosition", bad, err)
		}
	}
}
