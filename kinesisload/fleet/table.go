package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Item is one item of a [Table]: a key (Partition and Key), a version, and
// attributes. A zero Version means the item does not exist.
type Item struct {
	// Partition and Key identify the item: Query reads a partition's
	// items, sorted by Key.
	Partition, Key string
	// Version is set by the Table: 0 for an absent item; at the item's
	// creation, a version its key never had in an earlier life (one
	// deleted since; see NewVersion), and one more after every write
	// since. Every write is conditional on it, so a read-modify-write
	// never loses another's write, nor lands on a later life of the item
	// (deleted by hand and written again) that happens to have reached
	// the version it read.
	Version uint64
	// Fields are the item's scalar attributes.
	Fields map[string]string
	// Maps are the item's map attributes: each a map of string entries,
	// the only attributes SetEntry changes one entry of.
	Maps map[string]map[string]string
}

// Exists reports whether it is a stored item (Version > 0).
func (it Item) Exists() bool { return it.Version > 0 }

// Field returns the scalar attribute name, or "".
func (it Item) Field(name string) string { return it.Fields[name] }

// Clone returns a deep copy of it.
func (it Item) Clone() Item {
	c := it
	c.Fields = maps.Clone(it.Fields)
	if it.Maps != nil {
		c.Maps = make(map[string]map[string]string, len(it.Maps))
		for k, m := range it.Maps {
			c.Maps[k] = maps.Clone(m)
		}
	}
	return c
}

// Table is the storage seam of the fleet protocol: a store of versioned
// items with single-item conditional writes, and nothing more (no
// transactions, no server clock, no TTL). [MemoryTable] is one, for tests;
// kinesisload/dynamo's is DynamoDB. Every method must be safe for
// concurrent use and must honour ctx. [tabletest.Run] checks a Table
// against this contract.
//
// A Table serves one application: every stream and generation of it has
// partitions of its own (the protocol names them; see [Coordinator]).
type Table interface {
	// Get returns the item (partition, key) as last written (a
	// strongly consistent read): an Item with Version 0 and no
	// attributes, not an error, when it does not exist.
	Get(ctx context.Context, partition, key string) (Item, error)
	// GetField is Get of one scalar attribute: the item (partition,
	// key) with its Version and, if it has it, its scalar attribute
	// field, nothing else (a strongly consistent read). It serves a
	// small value read often from a large item: a table may bill the
	// whole item, but the answer carries the field alone.
	GetField(ctx context.Context, partition, key, field string) (Item, error)

	// Query returns every item of partition (a strongly consistent
	// read), sorted by Key: none, not an error, when it has none.
	Query(ctx context.Context, partition string) ([]Item, error)

	// Put writes it whole (its Fields and Maps replace the stored ones)
	// on condition that the stored item's version is it.Version (0: the
	// item must not exist), and returns the item as stored: with Version
	// it.Version+1, or, when it creates the item, a version the key
	// never had (see [Item.Version]). When the condition fails it
	// returns an error wrapping [ErrConflict] and changes nothing.
	Put(ctx context.Context, it Item) (Item, error)

	// Delete removes the item on condition that its version is version
	// (an absent item: nothing to do, nil). When the condition fails it
	// returns an error wrapping [ErrConflict].
	Delete(ctx context.Context, partition, key string, version uint64) error

	// SetEntry sets entry of the item's map attribute field to value (an
	// empty value removes the entry) on condition that the entry's
	// current value is old ("" for an absent entry, also of an absent
	// item or field), creating the item or the field when needed,
	// without touching anything else of the item but its version, which
	// grows by one (creating the item, as Put does). It returns the item
	// as stored after the write. When the condition fails it returns an
	// error wrapping [ErrConflict] and changes nothing. Entries of one item written by different hosts do
	// not conflict with each other: this is what lets every host write
	// its heartbeat into one item.
	SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (Item, error)
}

// MemoryTable is a [Table] in memory, for tests (the protocol's own, and
// kinesisload/coordtest's in-memory fleet). The zero value is not valid:
// use [NewMemoryTable].
type MemoryTable struct {
	mu    sync.Mutex
	items map[string]map[string]Item // partition, key
	// gone holds the last version of every item deleted: an item
	// created again starts above it.
	gone map[string]map[string]uint64
}

// NewVersion is a version for an item a Table creates that its key never
// had, for a Table that cannot remember its deleted items' versions (as
// MemoryTable does): the microseconds since 1970 on now's clock. It is
// above the versions of the key's earlier lives unless one was written
// more times than the microseconds between its creation and now, or the
// clocks of the hosts that created them are that far apart; two lives
// share a version only if their creations' clocks are exactly that far
// apart.
func NewVersion(now time.Time) uint64 {
	return max(1, uint64(max(0, now.UnixMicro())))
}

var _ Table = (*MemoryTable)(nil)

// NewMemoryTable returns an empty table.
func NewMemoryTable() *MemoryTable {
	return &MemoryTable{items: map[string]map[string]Item{}, gone: map[string]map[string]uint64{}}
}

// Get implements [Table].
func (t *MemoryTable) Get(ctx context.Context, partition, key string) (Item, error) {
	if err := ctx.Err(); err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if it, ok := t.items[partition][key]; ok {
		return it.Clone(), nil
	}
	return Item{Partition: partition, Key: key}, nil
}

// GetField implements [Table].
func (t *MemoryTable) GetField(ctx context.Context, partition, key, field string) (Item, error) {
	it, err := t.Get(ctx, partition, key)
	return only(it, field), err
}

// only returns it with its Version and its scalar attribute field alone.
func only(it Item, field string) Item {
	out := Item{Partition: it.Partition, Key: it.Key, Version: it.Version}
	if v, ok := it.Fields[field]; ok {
		out.Fields = map[string]string{field: v}
	}
	return out
}

// Query implements [Table].
func (t *MemoryTable) Query(ctx context.Context, partition string) ([]Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.items[partition]
	out := make([]Item, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		out = append(out, p[k].Clone())
	}
	return out, nil
}

// Put implements [Table].
func (t *MemoryTable) Put(ctx context.Context, it Item) (Item, error) {
	if err := ctx.Err(); err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.items[it.Partition][it.Key]
	if cur.Version != it.Version {
		return Item{}, fmt.Errorf("%w: put %s/%s at version %d: the item is at version %d", ErrConflict, it.Partition, it.Key, it.Version, cur.Version)
	}
	stored := it.Clone()
	stored.Version = it.Version + 1
	if it.Version == 0 {
		stored.Version = t.created(it.Partition, it.Key)
	}
	t.store(stored)
	return stored.Clone(), nil
}

// created is the version of an item the table creates: above the last of
// the key's earlier lives. t.mu must be held.
func (t *MemoryTable) created(partition, key string) uint64 {
	return t.gone[partition][key] + 1
}

// Delete implements [Table].
func (t *MemoryTable) Delete(ctx context.Context, partition, key string, version uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.items[partition][key]
	if !ok {
		return nil
	}
	if cur.Version != version {
		return fmt.Errorf("%w: delete %s/%s at version %d: the item is at version %d", ErrConflict, partition, key, version, cur.Version)
	}
	delete(t.items[partition], key)
	if t.gone[partition] == nil {
		t.gone[partition] = map[string]uint64{}
	}
	t.gone[partition][key] = cur.Version
	return nil
}

// SetEntry implements [Table].
func (t *MemoryTable) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (Item, error) {
	if err := ctx.Err(); err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.items[partition][key]
	if !ok {
		cur = Item{Partition: partition, Key: key}
	}
	if got := cur.Maps[field][entry]; got != old {
		return Item{}, fmt.Errorf("%w: set %s/%s %s[%s] from %q: it is %q", ErrConflict, partition, key, field, entry, old, got)
	}
	next := cur.Clone()
	if next.Maps == nil {
		next.Maps = map[string]map[string]string{}
	}
	m := next.Maps[field]
	if m == nil {
		m = map[string]string{}
		next.Maps[field] = m
	}
	if value == "" {
		delete(m, entry)
	} else {
		m[entry] = value
	}
	next.Version = cur.Version + 1
	if !cur.Exists() {
		next.Version = t.created(partition, key)
	}
	t.store(next)
	return next.Clone(), nil
}

// store keeps it; t.mu must be held.
func (t *MemoryTable) store(it Item) {
	p := t.items[it.Partition]
	if p == nil {
		p = map[string]Item{}
		t.items[it.Partition] = p
	}
	p[it.Key] = it
}

// Partitions returns the names of the partitions that hold items, sorted:
// for tests and tools.
func (t *MemoryTable) Partitions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for p, items := range t.items {
		if len(items) > 0 {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
