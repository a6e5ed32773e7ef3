// Package bench holds tidemark's end-to-end benchmarks. Issue 7: start
// position resolution on the emulators, consuming at the Kinesis limits and
// without them, checkpoint overhead and initialisation at scale. Issue 11:
// start-up of 1,000 and 20,000 shards, memory of 1,000 hot shards and
// throughput under the Loader's bounds, an idle stream of 1,000 shards.
// Issue 14: enhanced fan-out against polling (latency with a modelled
// network, three applications on one stream).
//
// The package has no code of its own; the benchmarks are in its _test.go
// files and run only with go test -bench. Results, machine and commands are
// in BENCHMARKS.md at the module root.
package bench
