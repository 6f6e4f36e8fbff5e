package warmcache

import (
	"context"
	"time"
)

// Entry is what a tier holds for one key: the value's bytes as stored and
// the row's version, or, when Found is false, the fact that the key is absent.
// An absent entry's Version is the version of the delete that removed the
// key, or zero when no such delete is known.
type Entry struct {
	Value   []byte
	Version int64
	Found   bool
	// FreshUntil is when a cached entry goes stale; the hot tier sets it on
	// fill and returns it on read. Zero means fresh.
	FreshUntil time.Time
	// ExpiresAt is when the row expires, as its writer asked (a TTL); from
	// then on the key reads as absent on every tier. Zero means never.
	ExpiresAt time.Time
}

// Fill is one entry to store in the hot tier. The core decides its
// lifetime: Entry.FreshUntil is when it goes stale, and Keep how long the
// tier keeps it (its freshness, and the namespace's MaxStale more for a
// present entry, so that it can be served stale).
type Fill struct {
	Key   Key
	Entry Entry
	Keep  time.Duration
	// Cached says that the tier held an entry of the key when the core
	// last read it (an expired or absent one), or likely holds one (a
	// write): the tier may then compare versions at once instead of first
	// trying to create the key. It changes round trips, never the outcome.
	Cached bool
	// Replace makes the fill only replace an entry the tier holds (under
	// the same version rules): with nothing cached for the key, nothing is
	// stored. A change read from the warehouse's log is filled so (the
	// core's restart rule).
	Replace bool
}

// Hot is the hot tier: a shared cache in front of the warehouse. It only
// stores and fetches; every policy (lifetimes, staleness, what to fill) is
// the core's. A read of one key is a batch of one. Its implementations are
// safe for concurrent use.
type Hot interface {
	// GetMany returns the cached entries of keys in one round trip; hits[i]
	// is false when nothing is cached for keys[i] (or the cached value
	// cannot be read). A cached absent entry is a hit with Found false.
	// entries and hits have the length of keys.
	GetMany(ctx context.Context, ns *Namespace, keys []Key) (entries []Entry, hits []bool, err error)
	// FillMany stores each fill for its Keep, unless the tier already holds
	// a newer version of the key, or an absent entry of a delete at the
	// same version. An absent entry with version zero is stored only when
	// nothing is cached for the key, and a Replace fill only when something
	// is. FillMany is how both reads and writes update the tier, so their
	// order is decided by versions. Each key is filled on its own: when
	// some fail, others may still be stored.
	FillMany(ctx context.Context, ns *Namespace, fills []Fill) error
	// Ping reports whether the tier answers.
	Ping(ctx context.Context) error
}

// Warm is the warm tier: the warehouse that is the source of truth. Its
// implementations are safe for concurrent use.
type Warm interface {
	// LookupMany reads keys in one round trip. The result has the length
	// and order of keys; an absent key is an Entry with Found false. A read
	// of one key is a batch of one.
	LookupMany(ctx context.Context, ns *Namespace, keys []Key) ([]Entry, error)
	// Write applies writes in their order, atomically: all of them commit,
	// or none. It returns one entry per write: for an upsert the value as
	// the warehouse will return it on read and its new version; for a
	// delete an absent entry at the delete's version, newer than any
	// version the key had, or at version zero when the key was already
	// absent and the write allows it (AbsentOK). A failed precondition
	// (IfMatch, IfAbsent) wraps ErrVersionMismatch, the delete of an absent
	// key ErrNotFound, a value the table rejects ErrInvalidValue.
	Write(ctx context.Context, ns *Namespace, writes []Write) ([]Entry, error)
	// Ping reports whether the tier answers.
	Ping(ctx context.Context) error
}

// Write is one change of a Warm.Write: an upsert of Value, or a delete.
type Write struct {
	Key Key
	// Value is the upserted value's bytes.
	Value []byte
	// Delete makes the write a delete.
	Delete bool
	// IfMatch, when not nil, is the version the row must have.
	IfMatch *int64
	// IfAbsent makes an upsert only create: the key must not exist.
	IfAbsent bool
	// AbsentOK makes the delete of an absent key succeed (without IfMatch)
	// instead of failing with ErrNotFound.
	AbsentOK bool
	// ExpiresAt, when not zero, is when the upserted row expires.
	ExpiresAt time.Time
	// TTL, when positive, makes the upserted row expire that long after
	// the warehouse's clock at the write, so that every instance agrees on
	// the expiry; it wins over ExpiresAt. The entry the write returns
	// carries the expiry the warehouse computed.
	TTL time.Duration
}

// Near is an optional in-process cache in front of the hot tier (L1): small,
// bounded by bytes, with a short TTL. Its implementations are safe for
// concurrent use and never block on I/O.
type Near interface {
	// Get returns the entry cached for key, if any and still live.
	Get(ns *Namespace, key Key) (Entry, bool)
	// Set caches e for key for ttl, which the core decides (see
	// Service.nearLife), unless a newer version is cached. It does nothing
	// when ttl is not positive, and it may decline to cache (admission
	// policy, size bound).
	Set(ns *Namespace, key Key, e Entry, ttl time.Duration)
	// Invalidate drops the entry for key unless it is at least version.
	Invalidate(ns *Namespace, key Key, version int64)
}

// Invalidations tells the other instances of the service that a write
// replaced key at version, so that they drop it from their near caches.
type Invalidations interface {
	Publish(ctx context.Context, ns *Namespace, key Key, version int64) error
}

// FillPublisher is Invalidations carried by the hot tier's own server,
// which can store fills and publish their invalidations together, in fewer
// round trips than FillMany and a Publish of each. The core updates the
// caches through it when Options.Invalidations is one.
type FillPublisher interface {
	// FillPublish is the hot tier's FillMany of fills, and Publish of each
	// fill's key at its version: fillErr is FillMany's error, publishErr
	// the first Publish's. The invalidations are published even when the
	// fills fail.
	FillPublish(ctx context.Context, ns *Namespace, fills []Fill) (fillErr, publishErr error)
}
