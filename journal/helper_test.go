package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Child-process helpers. The test binary re-executes itself with
// helperEnv set to a mode; TestMain runs the mode instead of the tests.
const (
	helperDirEnv = "TIDEMARK_JOURNAL_DIR"
	helperRunEnv = "TIDEMARK_JOURNAL_RUN"

	// helperAppenders is how many goroutines append in the "append" mode.
	helperAppenders = 4
)

// helperConfig is the config of the journal the helpers and the crash test
// open: small segments, so that kills land in rolls and compactions too.
func helperConfig() Config {
	cfg := DefaultConfig()
	cfg.SegmentSize = 4 << 10
	return cfg
}

func runHelper(mode string) (int, error) {
	dir := os.Getenv(helperDirEnv)
	switch mode {
	case "lock":
		j, err := Open(dir, DefaultConfig())
		switch {
		case err == nil:
			fmt.Println("opened")
			return 0, j.Close()
		case errors.Is(err, ErrLocked) && strings.Contains(err.Error(), dir):
			fmt.Println("locked")
			return 0, nil
		}
		return 1, err
	case "append":
		return 1, helperAppend(dir, os.Getenv(helperRunEnv))
	case "append-large":
		return 1, helperAppendLarge(dir, os.Getenv(helperRunEnv))
	}
	return 2, fmt.Errorf("unknown helper mode %q", mode)
}

// helperAppend appends records "RUN-gG-I" from helperAppenders goroutines
// until it is killed, printing "begin R" before each Append and "ack R"
// after it returns. Meanwhile it snapshots its state (every record so far,
// one per line) every few milliseconds. It prints "ready" once the
// journal is open.
func helperAppend(dir, run string) error {
	ctx := context.Background()
	j, err := Open(dir, helperConfig())
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		history = map[uint64]string{} // index -> record
		prefix  []string              // records 1..len(prefix), all known
	)
	err = j.Replay(ctx, func(e Entry) error {
		if e.Snapshot {
			prefix = splitState(e.Data)
			return nil
		}
		prefix = append(prefix, string(e.Data))
		return nil
	})
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(s string) {
		outMu.Lock()
		defer outMu.Unlock()
		os.Stdout.WriteString(s + "\n")
	}
	say("ready")
	for g := range helperAppenders {
		go func() {
			for i := 0; ; i++ {
				r := fmt.Sprintf("%s-g%d-%d", run, g, i)
				say("begin " + r)
				idx, err := j.Append(ctx, []byte(r))
				if err != nil {
					say("error " + err.Error())
					return
				}
				mu.Lock()
				history[idx] = r
				mu.Unlock()
				say("ack " + r)
			}
		}()
	}
	for {
		time.Sleep(3 * time.Millisecond)
		mu.Lock()
		for {
			r, ok := history[uint64(len(prefix)+1)]
			if !ok {
				break
			}
			delete(history, uint64(len(prefix)+1))
			prefix = append(prefix, r)
		}
		state := strings.Join(prefix, "\n")
		index := uint64(len(prefix))
		mu.Unlock()
		if err := j.Snapshot(ctx, index, []byte(state)); err != nil {
			say("error " + err.Error())
			return err
		}
	}
}

// splitState parses a state written by helperAppend.
func splitState(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// parseRecord splits "RUN-gG-I" into its goroutine and sequence number.
func parseRecord(r string) (run string, g, i int, err error) {
	parts := strings.Split(r, "-")
	if len(parts) != 3 || !strings.HasPrefix(parts[1], "g") {
		return "", 0, 0, fmt.Errorf("bad record %q", r)
	}
	g, err1 := strconv.Atoi(parts[1][1:])
	i, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("bad record %q", r)
	}
	return parts[0], g, i, nil
}
