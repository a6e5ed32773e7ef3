package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	flagSeed  = flag.Int64("sim.seed", 0, "replay this one seed, printing its schedule and the Loaders' logs")
	flagFirst = flag.Int64("sim.first", 1, "the first seed of the run")
	flagSeeds = flag.Int("sim.seeds", 0, "how many seeds to run (from -sim.first); 0: the default budget, 1,500 (150 with -race)")
	flagFor   = flag.Duration("sim.for", 0, "if set, run seeds from -sim.first for this long instead of -sim.seeds")
	flagStuck = flag.Duration("sim.stuck", 3*time.Minute, "real time after which a schedule is reported stuck")
)

// journalDir returns an empty directory for a single host's journal: in
// memory (/dev/shm) where there is one, so that fsync costs nothing.
func journalDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "tidemark-sim-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// runSeed runs one seed in a bubble of its own and fails t with the
// oracles' findings and the command that replays it.
func runSeed(t *testing.T, seed int64, verbose bool) Result {
	var res Result
	// A schedule whose virtual clock stands still while real time passes
	// is stuck (a goroutine spinning, or blocked on a mutex held across a
	// wait): print every goroutine and stop.
	watchdog := time.AfterFunc(*flagStuck, func() {
		buf := make([]byte, 64<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "sim: seed %d stuck for %v of real time; replay: go test ./internal/sim -run 'TestSimulation$' -sim.seed=%d -v\n%s", seed, *flagStuck, seed, buf[:n])
		os.Exit(2)
	})
	defer watchdog.Stop()
	synctest.Test(t, func(t *testing.T) {
		opt := Options{Dir: journalDir(t)}
		if verbose {
			opt.Log = os.Stderr
		}
		res = Run(seed, opt)
	})
	if len(res.Failures) > 0 {
		t.Errorf("%v\n%s\nreplay: go test ./internal/sim -run 'TestSimulation$' -sim.seed=%d -v\ntrace:\n%s",
			res.Spec, strings.Join(res.Failures, "\n"), seed, strings.Join(res.Trace, "\n"))
	}
	return res
}

// TestSimulation runs seeded schedules of the whole system (see the package
// doc): by default a fixed set of seeds, the same on every run.
func TestSimulation(t *testing.T) {
	if *flagSeed != 0 {
		res := runSeed(t, *flagSeed, true)
		t.Logf("%v: %d records put, %d required; healed at %v, all delivered at %v", res.Spec, res.Puts, res.Required, res.Healed, res.Done)
		return
	}
	seeds := *flagSeeds
	if seeds == 0 {
		seeds = 1500
		if raceEnabled {
			seeds = 150
		}
	}
	var (
		next     = *flagFirst
		mu       sync.Mutex
		ran      atomic.Int64
		failed   atomic.Int64
		began    = time.Now()
		deadline time.Time
	)
	if *flagFor > 0 {
		deadline = began.Add(*flagFor)
	}
	take := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if deadline.IsZero() && next >= *flagFirst+int64(seeds) || !deadline.IsZero() && time.Now().After(deadline) {
			return 0, false
		}
		next++
		return next - 1, true
	}
	workers := runtime.GOMAXPROCS(0)
	for i := range workers {
		t.Run(fmt.Sprintf("worker%d", i), func(t *testing.T) {
			t.Parallel()
			for {
				seed, ok := take()
				if !ok {
					return
				}
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					runSeed(t, seed, false)
					ran.Add(1)
					if t.Failed() {
						failed.Add(1)
					}
				})
			}
		})
	}
	t.Cleanup(func() {
		d := time.Since(began)
		t.Logf("%d schedules in %v (%.0f an hour on %d workers), %d failed", ran.Load(), d.Round(time.Second),
			float64(ran.Load())/d.Hours(), workers, failed.Load())
	})
}
