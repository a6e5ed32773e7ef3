package journal_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/tidemark/tidemark/journal"
)

// A journal records decisions durably; Replay rebuilds the state from the
// latest snapshot and the records after it.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "journal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	// Each Append is durable when it returns.
	if _, err := j.Append(ctx, []byte("shard-1=AFTER:100")); err != nil {
		log.Fatal(err)
	}
	last, err := j.Append(ctx, []byte("shard-2=TRIM_HORIZON"), []byte("shard-1=AFTER:250"))
	if err != nil {
		log.Fatal(err)
	}
	// A snapshot of the state after record `last` lets the journal drop
	// the records it covers.
	if err := j.Snapshot(ctx, last, []byte("shard-1=AFTER:250,shard-2=TRIM_HORIZON")); err != nil {
		log.Fatal(err)
	}
	if _, err := j.Append(ctx, []byte("shard-2=AFTER:7")); err != nil {
		log.Fatal(err)
	}
	if err := j.Close(); err != nil {
		log.Fatal(err)
	}

	// After a restart (or a crash), replay yields the snapshot, then the
	// records after it.
	j, err = journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	err = j.Replay(ctx, func(e journal.Entry) error {
		if e.Snapshot {
			fmt.Printf("snapshot up to %d: %s\n", e.Index, e.Data)
		} else {
			fmt.Printf("record %d: %s\n", e.Index, e.Data)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// snapshot up to 3: shard-1=AFTER:250,shard-2=TRIM_HORIZON
	// record 4: shard-2=AFTER:7
}

// NewMemory gives tests a journal with the same contract and no files.
func ExampleNewMemory() {
	ctx := context.Background()
	j := journal.NewMemory()
	defer j.Close()

	j.Append(ctx, []byte("a"), []byte("b"))
	j.Snapshot(ctx, 1, []byte("state after a"))
	j.Append(ctx, []byte("c"))

	j.Replay(ctx, func(e journal.Entry) error {
		fmt.Println(e.Index, e.Snapshot, string(e.Data))
		return nil
	})
	// Output:
	// 1 true state after a
	// 2 false b
	// 3 false c
}

// Open refuses a damaged journal with a *CorruptError naming the file and
// offset; Repair, called on purpose, cuts it back to the last good record.
func ExampleRepair() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "journal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range []string{"one", "two", "three"} {
		if _, err := j.Append(ctx, []byte(r)); err != nil {
			log.Fatal(err)
		}
	}
	j.Close()

	// Damage the data of record 2: each Append was a batch of its own (a
	// 40-byte header, then the frame), so after the 8-byte magic and
	// record 1's 64-byte batch, record 2's frame starts at 72+40 and its
	// data 20 bytes later.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	b, _ := os.ReadFile(segs[0])
	b[132] ^= 0xff
	os.WriteFile(segs[0], b, 0o600)

	_, err = journal.Open(dir, journal.DefaultConfig())
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		fmt.Printf("Open: %s at offset %d: %s\n", filepath.Base(ce.File), ce.Offset, ce.Reason)
	}
	report, err := journal.Repair(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range report.Cuts {
		fmt.Printf("Repair: cut %s at %d, %d bytes\n", filepath.Base(c.File), c.Offset, c.Bytes)
	}

	j, err = journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	j.Replay(ctx, func(e journal.Entry) error {
		fmt.Printf("record %d: %s\n", e.Index, e.Data)
		return nil
	})
	// Output:
	// Open: 0000000000000000-0000000000000001.seg at offset 112: record 2: CRC-32C mismatch: stored 0x6a292ede, computed 0x5e345502
	// Repair: cut 0000000000000000-0000000000000001.seg at 72, 136 bytes
	// record 1: one
}
