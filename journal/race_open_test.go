package journal

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

// Two Opens racing to create one new directory: the loser fails with
// ErrLocked and leaves the winner's journal alone. It removed the
// directory it had made, with the winner's journal in it: the winner's
// acknowledged appends were gone, and the next Open found a new journal
// (a first run again, at a fresh T0). Found by a review; it failed within
// the first five tries.
func TestTheLoserOfARaceToOpenANewDirectoryLeavesTheWinnersJournal(t *testing.T) {
	ctx := context.Background()
	for try := range 100 {
		dir := filepath.Join(t.TempDir(), "a", "b", "j")
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			js    [2]*FileJournal
			errs  [2]error
		)
		for k := range 2 {
			wg.Go(func() {
				<-start
				js[k], errs[k] = Open(dir, DefaultConfig())
			})
		}
		close(start)
		wg.Wait()
		var winner *FileJournal
		for k := range 2 {
			switch {
			case errs[k] == nil:
				winner = js[k]
			case !errors.Is(errs[k], ErrLocked):
				t.Fatalf("try %d: Open %d = %v, want success or ErrLocked", try, k, errs[k])
			}
		}
		if winner == nil {
			t.Fatalf("try %d: neither Open succeeded: %v, %v", try, errs[0], errs[1])
		}
		if _, err := winner.Append(ctx, []byte("acknowledged")); err != nil {
			t.Fatalf("try %d: the winner's Append: %v", try, err)
		}
		if err := winner.Close(); err != nil {
			t.Fatalf("try %d: the winner's Close: %v", try, err)
		}
		j, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatalf("try %d: reopen: %v", try, err)
		}
		n := 0
		if err := j.Replay(ctx, func(Entry) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		j.Close()
		if n != 1 {
			t.Fatalf("try %d: the winner's journal replays %d records after a reopen, want its 1 acknowledged append", try, n)
		}
	}
}
