package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// rewind --to TIME must not move a shard forward past records not read
// yet when the first pages status reads from its position are empty (a
// gap in the shard) while Kinesis says the position is far behind: it
// could not see the oldest unread record, so it must refuse (or at least
// warn), not move the shard on silently.
func TestRewindToATimeRefusesToPassAGapOfUnreadRecords(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	r1 := w.put("s", true, []byte("r1"))
	w.clock.Advance(30 * time.Minute)
	w.put("s", true, []byte("r2")) // not read, arrived before the time
	w.clock.Advance(30 * time.Minute)
	w.put("s", true, []byte("r3"))
	w.clock.Advance(time.Minute)
	const shard = "shardId-000000000000"
	dir := journalWith(t, "s", kinesisload.ShardProgress{ShardID: shard, State: kinesisload.StateActive, Position: scan.AfterSequence(r1)})
	env := w.env()
	client := &emptyPages{Fake: w.fake, n: 5, behind: (61 * time.Minute).Milliseconds()}
	env.Kinesis = func(context.Context, *Options) (scan.Client, error) { return client, nil }
	at := t0.Add(45 * time.Minute).Format(time.RFC3339)
	var out, errOut strings.Builder
	code := Run(context.Background(), env, []string{"rewind", "--dir", dir, "--stream", "s", "--to", at}, &out, &errOut)
	p, _ := loadJournal(t, dir, "s")
	moved := !p[shard].Position.Equal(scan.AfterSequence(r1))
	if moved && !strings.Contains(out.String(), "warning") {
		t.Errorf("rewind --to %s of a shard an hour behind (r2 unread, before the time) = %d, moved it to %v with no warning and no --forward:\n%s%s",
			at, code, p[shard].Position, out.String(), errOut.String())
	}
}

// rewind --to AFTER_SEQUENCE_NUMBER:N with N past records the shard has
// not read yet skips them, with no --forward and no warning, where the
// same move by a time is refused.
func TestRewindToASequencePastUnreadRecordsIsRefused(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	r1 := w.put("s", true, []byte("r1"))
	w.put("s", true, []byte("r2")) // never read
	r3 := w.put("s", true, []byte("r3"))
	const shard = "shardId-000000000000"
	dir := journalWith(t, "s", kinesisload.ShardProgress{ShardID: shard, State: kinesisload.StateActive, Position: scan.AfterSequence(r1)})
	code, out, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--shards", shard, "--to", "AFTER_SEQUENCE_NUMBER:"+r3)
	p, _ := loadJournal(t, dir, "s")
	if !p[shard].Position.Equal(scan.AfterSequence(r1)) || code != ExitFailed {
		t.Errorf("rewind --to AFTER_SEQUENCE_NUMBER:r3 of a shard at r1 (r2, r3 unread), without --forward = %d, moved it to %v:\n%s%s", code, p[shard].Position, out, errOut)
	}
}
