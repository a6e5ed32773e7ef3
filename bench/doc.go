// Package bench holds tidemark's end-to-end benchmarks (issue 7): start
// position resolution on the emulators, consuming at the Kinesis limits and
// without them, checkpoint overhead and initialisation at scale.
//
// The package has no code of its own; the benchmarks are in its _test.go
// files and run only with go test -bench. Results, machine and commands are
// in BENCHMARKS.md at the module root.
package bench
