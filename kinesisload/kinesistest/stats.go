package kinesistest

// ShardStats counts what one shard served. Calls that an injected fault
// failed before they reached the shard are not counted here; see
// [Fake.Calls].
type ShardStats struct {
	// GetRecordsCalls counts GetRecords calls that returned a page.
	GetRecordsCalls int64
	// GetRecordsThrottled counts GetRecords calls refused by a limit.
	GetRecordsThrottled int64
	// RecordsRead and BytesRead sum the records returned and their sizes
	// (data plus partition key).
	RecordsRead int64
	BytesRead   int64
	// GetShardIteratorCalls counts iterators issued for the shard.
	GetShardIteratorCalls int64
	// GetShardIteratorThrottled counts GetShardIterator calls refused by
	// [Limits.GetShardIteratorPerSecond].
	GetShardIteratorThrottled int64
	// RecordsWritten and BytesWritten sum the records the shard accepted.
	RecordsWritten int64
	BytesWritten   int64
	// WritesThrottled counts records refused by a write limit.
	WritesThrottled int64
	// SubscribeCalls counts the subscriptions started on the shard
	// (enhanced fan-out, every consumer); SubscribeRefused the
	// SubscribeToShard calls refused by [Limits.SubscribeToShardPerSecond]
	// or [Limits.ResubscribeWindow].
	SubscribeCalls   int64
	SubscribeRefused int64
	// SubscriptionsExpired counts subscriptions ended by
	// [SubscriptionTTL] (not those closed by their reader first).
	SubscriptionsExpired int64
	// EventsSent counts the events the shard's subscriptions made
	// (heartbeats included); RecordsPushed and BytesPushed sum their
	// records and sizes.
	EventsSent    int64
	RecordsPushed int64
	BytesPushed   int64
}

// Stats returns the statistics of one shard of a stream. The shard may be
// closed or even expired by retention; its counters remain readable until
// the stream is deleted.
func (f *Fake) Stats(streamName, shardID string) (ShardStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.streams[streamName]
	if !ok {
		return ShardStats{}, f.errStreamNotFound(streamName)
	}
	for _, s := range st.shards {
		if s.id == shardID {
			return s.stats, nil
		}
	}
	return ShardStats{}, f.errShardNotFound(streamName, shardID)
}
