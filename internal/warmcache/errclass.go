package warmcache

import (
	"context"
	"errors"
)

// Class is whose fault an error is. Every error is sorted once: an adapter
// wraps a driver's error with the core's sentinel of its class (see
// ErrUnavailable), and the core, the circuit breaker and the transports
// read the class back with Classify.
type Class int

// The classes of Classify.
const (
	// ClassNone is a nil error.
	ClassNone Class = iota
	// ClassClient is a request refused for what it asks: a bad key or
	// value, a failed precondition, an absent key, a bound exceeded, an
	// unknown or read-only namespace. The client gets a 4xx; when a tier
	// answered it, the tier is healthy.
	ClassClient
	// ClassConflict is a write rolled back for a concurrent one. Retrying
	// may succeed; the warehouse is healthy.
	ClassConflict
	// ClassUnavailable is a tier failing, or its deadline running out, or
	// the service refusing work to protect it. Only this class counts as a
	// failure for the circuit breaker.
	ClassUnavailable
	// ClassCanceled is the caller going away. It says nothing about the
	// tiers.
	ClassCanceled
	// ClassBug is anything else: an error of the service's own making,
	// answered as an internal error, never as a tier being unavailable.
	ClassBug
)

// Classify sorts err by the core sentinel it wraps, or by the context
// error it wraps.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrOverloaded):
		return ClassUnavailable
	case errors.Is(err, ErrConflict):
		return ClassConflict
	case errors.Is(err, ErrInvalidValue), errors.Is(err, ErrInvalidKey), errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrNotFound), errors.Is(err, ErrVersionMismatch), errors.Is(err, ErrUnknownNamespace),
		errors.Is(err, ErrReadOnly):
		return ClassClient
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ClassUnavailable
	}
	return ClassBug
}
