// Package fleetloop holds the fleet's SIGKILL loop: host processes whose
// Loaders share a kinesis-local stream through dynamo Coordinators on
// dynalite, both behind fault proxies, killed with SIGKILL at random
// moments, added and removed, while records are written and shards split
// and merge. The checks are those of the fleet-wide guarantee: nothing
// written after the fleet's initialisation is lost, no parent record is
// delivered after its child's first, a committed record is never
// delivered again, every duplicate comes from the uncommitted window of a
// host that was killed (or lost a lease unplanned), and a run with only
// planned moves (Close, scale-in) delivers nothing twice.
//
// The package has no code of its own besides this comment; everything is
// in its tests. The short form runs by default (about 30 kills); the long
// form (150 kills) runs with
//
//	go test ./internal/fleetloop -fleetloop.long
//
// or with TIDEMARK_RELIABILITY=long in the environment, like
// internal/reliability's loop, whose child-process, producer and stream
// helpers it shares (internal/killloop).
//
// A host is the test binary re-executed with TIDEMARK_FLEETLOOP_HOST set
// to its JSON configuration (host_test.go). Each host process has a host
// ID of its own and appends to a file of its own, fsynced before Deliver
// returns, one line per record:
//
//	D UNIXNANO EPOCH SHARD SEQUENCE "DATA"
//
// where UNIXNANO is when the Deliver call began (one machine, one clock:
// the order of the lines of all files), and EPOCH is the fencing epoch of
// the host's lease of SHARD. A lease lost unplanned (Lease.Lost closed
// before the host released it or left) appends
//
//	X UNIXNANO EPOCH SHARD "WHY"
//
// where WHY is the lease's Err.
package fleetloop
