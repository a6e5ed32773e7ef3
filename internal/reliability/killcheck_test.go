package reliability

import (
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/faultproxy"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
)

// checkpoint is what was durable when a loader was killed: the output
// file's length and the journal's progress.
type checkpoint struct {
	kill      int
	lines     int // lines in the output file when the loader died
	committed map[string]kinesisload.ShardProgress
}

// startKillProxy starts the fault proxy the loaders read through, with no
// faults yet (the kill loops turn on killFaults once the first loader has
// initialised). Cleanup closes it.
func startKillProxy(t *testing.T, upstream string, seed uint64) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.New(faultproxy.Config{Upstream: upstream, Seed: seed, MaxDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}

// drain waits until every record of want is in the output file at path.
// It fails the test when the loader exits by
// itself or limit passes first.
func drain(t *testing.T, loader *loaderProc, path string, want []written, limit time.Duration) {
	t.Helper()
	for start := time.Now(); ; {
		out, err := readOutput(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, l := range out {
			seen[l.data] = true
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w written) bool { return seen[w.Data] })
		if len(missing) == 0 {
			return
		}
		if loader.Exited() {
			t.Fatalf("the last loader exited by itself (%v) with %d of %d records missing:\n%s", loader.State(), len(missing), len(want), loader.Stderr())
		}
		if time.Since(start) > limit {
			t.Fatalf("%d of %d records not delivered %v after the last kill, e.g. %+v", len(missing), len(want), limit, missing[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkCommitted checks every kill's committed progress against the
// output: each record at or before a committed position was in the file
// when the loader died, and never appears again after it.
func checkCommitted(t *testing.T, checkpoints []checkpoint, want []written, out []line) {
	t.Helper()
	for _, cp := range checkpoints {
		before := map[string]bool{}
		for _, l := range out[:cp.lines] {
			before[l.data] = true
		}
		for _, w := range want {
			if pr, ok := cp.committed[w.Shard]; ok && killloop.Covers(pr.Position, w.Seq) && !before[w.Data] {
				t.Errorf("kill %d: %s (%s %s) is committed (%v) but was not delivered before the kill", cp.kill, w.Data, w.Shard, w.Seq, pr.Position)
			}
		}
		for i, l := range out[cp.lines:] {
			if pr, ok := cp.committed[l.shard]; ok && killloop.Covers(pr.Position, l.seq) {
				t.Errorf("kill %d: line %d: %s (%s %s) delivered again although committed at %v", cp.kill, cp.lines+i+1, l.data, l.shard, l.seq, pr.Position)
			}
		}
	}
}
