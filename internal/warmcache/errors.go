package warmcache

import "errors"

// Sentinel errors. Adapters and the core wrap them with context; transports
// map them to statuses with errors.Is in one table each. The text of an error
// that wraps a client error (ErrInvalidKey, ErrInvalidValue, ...) is written
// for the client and safe to show; other errors are not.
var (
	// ErrNotFound means the key does not exist in the namespace.
	ErrNotFound = errors.New("not found")
	// ErrUnknownNamespace means no namespace has the requested name.
	ErrUnknownNamespace = errors.New("unknown namespace")
	// ErrInvalidKey means the key is empty, too long, or not valid for the
	// namespace's key type.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidValue means a value to store is not acceptable JSON for the
	// namespace, or a request asks a JSON-only operation (a containment
	// query) of a namespace of opaque bytes.
	ErrInvalidValue = errors.New("invalid value")
	// ErrTooLarge means a body, value or batch exceeds its configured bound.
	ErrTooLarge = errors.New("too large")
	// ErrReadOnly means the namespace does not accept writes.
	ErrReadOnly = errors.New("namespace is read-only")
	// ErrVersionMismatch means an If-Match precondition did not hold.
	ErrVersionMismatch = errors.New("version mismatch")
	// ErrUnavailable means a tier needed for the request cannot answer now:
	// it cannot be reached, has no resources, is shutting down, or timed
	// out. Only a warehouse error that wraps it (or the warehouse deadline
	// running out) counts as a failure for the circuit breaker; an adapter
	// wraps it once, when it classifies the driver's error.
	ErrUnavailable = errors.New("unavailable")
	// ErrConflict means the warehouse rolled the write back for a
	// concurrent one (a serialization failure or deadlock); retrying may
	// succeed.
	ErrConflict = errors.New("conflict with a concurrent write")
	// ErrOverloaded means the request was refused to protect a tier.
	ErrOverloaded = errors.New("overloaded")
)
