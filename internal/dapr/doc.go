// Package dapr is the mapping of Dapr's state operations onto the core,
// which both Dapr surfaces stand on: the runtime API (internal/dapr/stateapi,
// Dapr's state API over HTTP and gRPC) and the pluggable state-store
// component (internal/dapr/pluggable, which daprd calls). ETags,
// concurrency, consistency, the accepted metadata and the errors mean the
// same on both; neither surface imports the other.
//
// The mapping:
//   - an ETag is the row's version, in decimal; an ETag that is not a
//     version is refused as invalid (ErrETagInvalid);
//   - a save or delete with an ETag must match the row's version, under
//     either concurrency, as state.postgresql holds it (state.redis too, for
//     a delete); an empty ETag is none, as Dapr's stores read it
//     (state.SetRequest.HasETag); a save without an ETag under first-write
//     only creates, and fails if the key exists;
//   - a delete of an absent key succeeds (without an ETag);
//   - a read with strong consistency reads the warehouse past the caches;
//     any other read is the tiered read;
//   - metadata: ttlInSeconds is the item's time to live, a whole number
//     of seconds up to warmcache.MaxTTL (-1 and 0: it never expires), and
//     anything else is refused as malformed; contentType application/json
//     (or a +json type) is accepted and any other is refused, unless the
//     surface drops it first for a namespace of opaque bytes; other keys are
//     ignored;
//   - a found item's response metadata names the tier that answered
//     (warmcache-source) and, when it expires, ttlExpireTime;
//   - errors: one table (Failures) gives each error its answer on both
//     surfaces: Dapr's errorCode, HTTP status and gRPC code on the runtime
//     API, and the gRPC code (with the "etag" field violation where daprd
//     reads one) that daprd expects of a pluggable component.
//
// Dapr's own protos (common.v1 of the runtime API, components.v1 of the
// component) carry the same options; Concurrency, StrongRead and ETagOf read
// either.
package dapr
