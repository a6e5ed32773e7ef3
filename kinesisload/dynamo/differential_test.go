package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fleet.ErrConflict):
		return "conflict"
	case errors.Is(err, fleet.ErrUnknown):
		return "unknown"
	}
	return "fatal:" + err.Error()
}

func norm(it fleet.Item) string {
	f := map[string]string{}
	maps.Copy(f, it.Fields)
	m := map[string]string{}
	for k, v := range it.Maps {
		m[k] = fmt.Sprint(len(v) > 0, v)
	}
	return fmt.Sprintf("exists=%v fields=%v maps=%v", it.Exists(), f, m)
}

// The fleet protocol's tests run on fleet.MemoryTable: they say something
// of DynamoDB only if dynamo.Table answers as it does. Random sequences of
// Get, Query, Put, Delete and SetEntry (current, zero, stale and too-high
// versions; empty, numeric and spaced values) go to both, and every
// answer, its class of error and the items read must agree.
func TestTableAnswersAsTheMemoryTable(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { answersAsMemory(t, seed) })
	}
}

func answersAsMemory(t *testing.T, seed int64) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	dt := NewTable(newClient(e.Endpoint, newFaults()), fmt.Sprintf("probe-%d", tableSeq.Add(1)), 10*time.Second)
	if err := dt.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	mt := fleet.NewMemoryTable()
	tables := []fleet.Table{mt, dt}
	rng := rand.New(rand.NewSource(seed))
	keys := []string{"k1", "k2"}
	vals := []string{"", "1", "c=1", "c=2", "x y"}
	fnames := []string{"a", "epoch", "owner"}
	mnames := []string{"beats", "pos"}
	entries := []string{"h1", "h2"}
	// version per table per key as last read, and versions seen
	last := [2]map[string]uint64{{}, {}}
	prev := [2]map[string]uint64{{}, {}}
	for step := 0; step < 600; step++ {
		key := keys[rng.Intn(len(keys))]
		op := rng.Intn(5)
		verChoice := rng.Intn(4) // 0: current, 1: zero, 2: previous, 3: current+1
		var it fleet.Item
		it.Partition, it.Key = "p", key
		if rng.Intn(2) == 0 {
			it.Fields = map[string]string{}
			for _, f := range fnames {
				if rng.Intn(2) == 0 {
					v := vals[rng.Intn(len(vals))]
					if f == "epoch" {
						v = fmt.Sprint(rng.Intn(100))
					}
					it.Fields[f] = v
				}
			}
		}
		if rng.Intn(2) == 0 {
			it.Maps = map[string]map[string]string{}
			mn := mnames[rng.Intn(2)]
			m := map[string]string{}
			for _, en := range entries {
				if rng.Intn(2) == 0 {
					m[en] = vals[rng.Intn(len(vals))]
				}
			}
			it.Maps[mn] = m
		}
		field, entry := mnames[rng.Intn(2)], entries[rng.Intn(2)]
		old, value := vals[rng.Intn(len(vals))], vals[rng.Intn(len(vals))]
		var res [2]string
		for i, tb := range tables {
			ver := func() uint64 {
				switch verChoice {
				case 0:
					return last[i][key]
				case 1:
					return 0
				case 2:
					return prev[i][key]
				}
				return last[i][key] + 1
			}()
			switch op {
			case 0:
				got, err := tb.Get(ctx, "p", key)
				if err == nil {
					prev[i][key], last[i][key] = last[i][key], got.Version
				}
				res[i] = "get " + class(err) + " " + norm(got)
			case 1:
				q, err := tb.Query(ctx, "p")
				s := ""
				for _, it := range q {
					s += it.Key + ":" + norm(it) + ";"
				}
				res[i] = "query " + class(err) + " " + s
			case 2:
				x := it.Clone()
				x.Version = ver
				got, err := tb.Put(ctx, x)
				if err == nil {
					prev[i][key], last[i][key] = last[i][key], got.Version
				}
				res[i] = fmt.Sprintf("put(v%d) %s %s", verChoice, class(err), norm(got))
			case 3:
				err := tb.Delete(ctx, "p", key, ver)
				res[i] = fmt.Sprintf("delete(v%d) %s", verChoice, class(err))
			case 4:
				got, err := tb.SetEntry(ctx, "p", key, field, entry, old, value)
				if err == nil {
					prev[i][key], last[i][key] = last[i][key], got.Version
				}
				res[i] = fmt.Sprintf("setentry(%s.%s %q->%q) %s %s", field, entry, old, value, class(err), norm(got))
			}
		}
		if res[0] != res[1] {
			t.Fatalf("step %d key %s:\nmemory: %s\ndynamo: %s", step, key, res[0], res[1])
		}
	}
}
