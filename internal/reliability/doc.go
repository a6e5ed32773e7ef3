// Package reliability holds tidemark's reliability suite: tests that run a
// Loader against kinesis-local through a fault-injecting proxy, kill it with
// SIGKILL at random moments, and feed it bad input.
//
// The package has no code of its own besides this comment; everything is in
// its tests. The short form runs by default (10 kills); the long form
// (100 kills) runs with
//
//	go test ./internal/reliability -reliability.long
//
// or with TIDEMARK_RELIABILITY=long in the environment.
//
// The loader under test runs in a child process: the test binary re-executed
// with TIDEMARK_RELIABILITY_LOADER set to its JSON configuration (see
// loaderproc_test.go). It prints one line "INIT_RESOLVED {json}" on stdout
// when the Loader's initialisation is journaled, and its Sink appends every
// delivered record to a file as `SHARD SEQUENCE "DATA"`, fsynced before
// Deliver returns.
package reliability
