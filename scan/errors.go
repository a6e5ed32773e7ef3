package scan

import "errors"

// The sentinel errors of the package: each is wrapped by the errors its
// documentation names, so that errors.Is tells them apart.
var (
	// ErrQueueFull is returned, wrapped, by [Resolver.Resolve] when the
	// batch's shards do not fit in the Resolver's queue of waiting shards.
	ErrQueueFull = errors.New("scan: resolver queue full")
	// ErrInvalidConfig is returned, wrapped with the field and value, by
	// [NewResolver] for an invalid [Config].
	ErrInvalidConfig = errors.New("scan: invalid config")
	// ErrInvalidRequest is returned, wrapped with the reason, by
	// [Resolver.Resolve] for a [Request] it cannot serve.
	ErrInvalidRequest = errors.New("scan: invalid request")
	// ErrPanic is wrapped by the error of a shard whose scan panicked.
	ErrPanic = errors.New("scan: panic during scan")
	// ErrInvalidPosition is returned, wrapped with the offending input, for a
	// position that cannot be parsed or is not valid.
	ErrInvalidPosition = errors.New("scan: invalid position")
)
