package kinesisload

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/journal"
)

// A record written by a later tidemark, with a field this version does
// not know (here a made-up "reset" that a later version might journal to
// move shards back), was replayed as if the field were not there: the
// store applied what it understood and dropped the rest. It refuses the
// journal now (ErrStoreCorrupt, naming the record and the likely cause;
// found by a review).
func TestAStoreRecordOfALaterVersionIsRefusedNotHalfApplied(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	if _, err := j.Append(ctx, []byte(`{"stream":"s","updates":[{"id":"shardId-0","state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:5"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, []byte(`{"stream":"s","reset":[{"id":"shardId-0","pos":"TRIM_HORIZON"}]}`)); err != nil {
		t.Fatal(err)
	}
	_, err := NewJournalStore(ctx, j, 0)
	if !errors.Is(err, ErrStoreCorrupt) || !strings.Contains(err.Error(), "record 2") || !strings.Contains(err.Error(), "later version") {
		t.Fatalf("NewJournalStore on a record with an unknown field: err = %v, want ErrStoreCorrupt naming record 2", err)
	}
}
