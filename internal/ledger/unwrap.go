package ledger

import "fmt"

// Optional store interfaces (Counter, RankedLister, RolloverStore, …) are
// found through the decorators budgetd wraps a store in (storemetrics,
// tracing) by As.

// Forwarder is a Store that wraps another (Unwrap) and implements the
// optional interfaces of a store (Counter, RankedLister, …) by forwarding
// each call to the store it wraps, to time or trace it (storemetrics,
// tracing). It serves an optional interface only when the store it wraps
// does: As looks through it otherwise.
type Forwarder interface {
	Unwrap() Store
	// ForwardsOptional marks the wrapper; it does nothing.
	ForwardsOptional()
}

// Forwarded returns the store of interface T that the store f wraps is or
// wraps, for f to forward a call of op to, or an error wrapping
// ErrNotServed when there is none.
func Forwarded[T any](f Forwarder, op string) (T, error) {
	t, ok := As[T](f.Unwrap())
	if !ok {
		return t, fmt.Errorf("%s: %w", op, ErrNotServed)
	}
	return t, nil
}

// As returns the store of interface T that st is or wraps (through Unwrap
// methods), and false when there is none. A Forwarder is taken as a T only
// when the store it wraps is or wraps one.
func As[T any](st Store) (T, bool) {
	var zero T
	for {
		if t, ok := st.(T); ok {
			if f, fwd := st.(Forwarder); fwd {
				if _, inner := As[T](f.Unwrap()); !inner {
					return zero, false
				}
			}
			return t, true
		}
		u, ok := st.(interface{ Unwrap() Store })
		if !ok {
			return zero, false
		}
		st = u.Unwrap()
	}
}
