package journal

import (
	"fmt"
	"time"
)

// Defaults of [Config], as [DefaultConfig] sets them.
const (
	// DefaultSegmentSize is the default Config.SegmentSize: 64 MiB.
	DefaultSegmentSize = 64 << 20
	// DefaultMaxRecordSize is the default Config.MaxRecordSize: 4 MiB.
	DefaultMaxRecordSize = 4 << 20
)

// Limits that [Config.Validate] enforces.
const (
	// MinSegmentSize is the smallest Config.SegmentSize: 1 KiB.
	MinSegmentSize = 1 << 10
	// MaxMaxRecordSize is the largest Config.MaxRecordSize: 1 GiB.
	MaxMaxRecordSize = 1 << 30
)

// Config configures the file journal. The zero Config is valid: a zero
// field means its default ([DefaultConfig] has them all).
type Config struct {
	// SegmentSize is the size in bytes at which the current segment file
	// is closed and a new one started: a batch is never split, so a
	// segment may exceed it by one batch. At least MinSegmentSize; 0
	// means DefaultSegmentSize.
	SegmentSize int64

	// MaxRecordSize is the largest record, in bytes, that Append accepts;
	// larger ones get ErrTooLarge. At least 1, at most MaxMaxRecordSize.
	// Lowering it does not make existing larger records unreadable. 0
	// means DefaultMaxRecordSize.
	MaxRecordSize int

	// afterStep, when set (by tests only), is called after each durable
	// step of a snapshot, a compaction, a segment roll and an append
	// batch, with the step's name; a non-nil error stops the operation
	// there and is returned, as a crash at that point would stop it. It
	// is called from the goroutine doing the step and may block it.
	afterStep func(step string) error

	// now, when set (by tests only), replaces time.Now for the write
	// times in batch headers.
	now func() time.Time
}

// DefaultConfig returns the default configuration: SegmentSize
// DefaultSegmentSize, MaxRecordSize DefaultMaxRecordSize.
func DefaultConfig() Config {
	return Config{SegmentSize: DefaultSegmentSize, MaxRecordSize: DefaultMaxRecordSize}
}

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.SegmentSize == 0 {
		c.SegmentSize = d.SegmentSize
	}
	if c.MaxRecordSize == 0 {
		c.MaxRecordSize = d.MaxRecordSize
	}
	return c
}

// Validate reports the first invalid field, naming it and its value; a
// zero field means its default and is valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.SegmentSize < MinSegmentSize {
		return fmt.Errorf("journal: Config.SegmentSize is %d, want at least %d", c.SegmentSize, MinSegmentSize)
	}
	if c.MaxRecordSize < 1 || c.MaxRecordSize > MaxMaxRecordSize {
		return fmt.Errorf("journal: Config.MaxRecordSize is %d, want 1 to %d", c.MaxRecordSize, MaxMaxRecordSize)
	}
	return nil
}

// step calls the test hook, if any.
func (c Config) step(name string) error {
	if c.afterStep == nil {
		return nil
	}
	return c.afterStep(name)
}
