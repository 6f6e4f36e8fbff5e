// Package auth is the access control of both transports: API keys (bearer
// tokens) stored as SHA-256 hashes, read and write scopes on lists of
// namespaces, and a rate limit per key.
//
// A token is a high-entropy random string chosen by the operator (for
// example 32 random bytes in hex, `openssl rand -hex 32`); the configuration
// holds only its SHA-256 hash. A fast hash is enough for such tokens: unlike
// a password, a token with 256 bits of entropy cannot be guessed from its
// hash by trying candidates, so a slow password hash would only add latency
// to every request. Presented tokens are hashed and compared with every
// configured hash in constant time, so the time taken says nothing about
// which key, if any, came close.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// Sentinel errors. Transports map them to statuses: ErrUnauthenticated to
// 401 / UNAUTHENTICATED, ErrForbidden to 403 / PERMISSION_DENIED and
// ErrRateLimited to 429 / RESOURCE_EXHAUSTED. Their text never says whether
// a key exists.
var (
	// ErrUnauthenticated means the request carries no valid API key.
	ErrUnauthenticated = errors.New("a valid API key is required")
	// ErrForbidden means the key lacks the scope the request needs.
	ErrForbidden = errors.New("the API key is not allowed to do this")
	// ErrRateLimited means the key has used up its request rate.
	ErrRateLimited = errors.New("rate limit exceeded")
)

// Scope is a set of permissions on a namespace.
type Scope uint8

// The scopes. A key may have both.
const (
	// ScopeRead allows GET, _mget and _query (gRPC Get, MGet, Query).
	ScopeRead Scope = 1 << iota
	// ScopeWrite allows PUT, DELETE and _load (gRPC Put, Delete, Load).
	ScopeWrite
)

// String returns "read", "write" or "read+write".
func (s Scope) String() string {
	var parts []string
	if s&ScopeRead != 0 {
		parts = append(parts, "read")
	}
	if s&ScopeWrite != 0 {
		parts = append(parts, "write")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// ParseScope reads "read" or "write".
func ParseScope(s string) (Scope, error) {
	switch s {
	case "read":
		return ScopeRead, nil
	case "write":
		return ScopeWrite, nil
	default:
		return 0, fmt.Errorf("scope must be read or write, got %q", s)
	}
}

// AllNamespaces in a Key's Namespaces grants its scopes on every namespace.
const AllNamespaces = "*"

// Key is one configured API key.
type Key struct {
	// ID names the key in logs and audit records. It is not secret.
	ID string
	// Hash is the SHA-256 of the token.
	Hash [sha256.Size]byte
	// Scopes are the operations the key may perform.
	Scopes Scope
	// Namespaces lists the namespaces the scopes apply to; AllNamespaces
	// ("*") means every namespace.
	Namespaces []string
	// Rate is the sustained requests per second allowed for the key. Zero
	// means no limit.
	Rate float64
	// Burst is how many requests may come at once above Rate. Zero means
	// max(1, ceil(Rate)).
	Burst int
}

// Allows reports whether the key has scope on namespace.
func (k *Key) Allows(namespace string, scope Scope) bool {
	if k.Scopes&scope != scope {
		return false
	}
	for _, ns := range k.Namespaces {
		if ns == AllNamespaces || ns == namespace {
			return true
		}
	}
	return false
}

var keyID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ParseHash reads a SHA-256 hash written as 64 hexadecimal digits.
func ParseHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != sha256.Size {
		return h, errors.New("must be a SHA-256 hash in 64 hexadecimal digits (printf %s \"$TOKEN\" | sha256sum)")
	}
	copy(h[:], b)
	return h, nil
}

// HashToken returns the hex SHA-256 of a token, the form a key's hash takes
// in the configuration.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Principal is the caller a request was authenticated as.
type Principal struct {
	// KeyID is the key's ID, or Anonymous when no keys are configured.
	KeyID string
	key   *Key
}

// Anonymous is the KeyID of every request when no keys are configured.
const Anonymous = "anonymous"

// Options tune a Keyring.
type Options struct {
	// Now is the clock of the rate limiter. Nil means time.Now.
	Now func() time.Time
}

// Keyring checks requests against the configured keys. A Keyring with no
// keys lets every request through as Anonymous. It is safe for concurrent
// use.
type Keyring struct {
	keys     []*Key
	limiters []*rate.Limiter // by index of keys; nil when the key has no limit
	now      func() time.Time
}

// NewKeyring returns a Keyring over keys. It fails when an ID is invalid or
// repeats, a hash repeats, or a key has no scope or no namespace. Each
// key's limiter lives as long as the Keyring, so the state it keeps is
// bounded by the number of keys.
func NewKeyring(keys []Key, opts Options) (*Keyring, error) {
	kr := &Keyring{now: opts.Now}
	if kr.now == nil {
		kr.now = time.Now
	}
	var errs []error
	ids := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i := range keys {
		k := keys[i]
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("api_keys[%d] %q: %s", i, k.ID, fmt.Sprintf(format, args...)))
		}
		if !keyID.MatchString(k.ID) {
			bad("id: must be 1-64 letters, digits, '_', '.' or '-'")
		}
		if k.ID == Anonymous {
			bad("id: %q is reserved for requests without keys", Anonymous)
		}
		if ids[k.ID] {
			bad("id: declared twice")
		}
		if hashes[k.Hash] {
			bad("sha256: the same hash as another key")
		}
		if k.Hash == ([sha256.Size]byte{}) {
			bad("sha256: missing")
		}
		ids[k.ID], hashes[k.Hash] = true, true
		if k.Scopes == 0 {
			bad("scopes: at least one of read and write is needed")
		}
		if len(k.Namespaces) == 0 {
			bad("namespaces: at least one namespace (or \"*\") is needed")
		}
		if k.Rate < 0 || math.IsNaN(k.Rate) || math.IsInf(k.Rate, 0) || k.Burst < 0 {
			bad("rate and burst: must not be negative")
		}
		k.Namespaces = append([]string(nil), k.Namespaces...)
		var lim *rate.Limiter
		if k.Rate > 0 {
			burst := k.Burst
			if burst == 0 {
				burst = max(1, int(math.Ceil(k.Rate)))
			}
			lim = rate.NewLimiter(rate.Limit(k.Rate), burst)
		}
		kr.keys = append(kr.keys, &k)
		kr.limiters = append(kr.limiters, lim)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return kr, nil
}

// Open reports whether the Keyring has no keys, so that every request is
// let through unauthenticated.
func (kr *Keyring) Open() bool { return len(kr.keys) == 0 }

// Authenticate finds the key whose hash is the token's and takes one
// request from its rate limit. It compares the token's hash with every
// key's hash in constant time. Errors wrap ErrUnauthenticated (no token, or
// one that matches no key) or are a *RateLimitError. On an open Keyring it
// returns the Anonymous principal whatever the token.
func (kr *Keyring) Authenticate(token string) (Principal, error) {
	if kr.Open() {
		return Principal{KeyID: Anonymous}, nil
	}
	if token == "" {
		return Principal{}, ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i, k := range kr.keys {
		// No early exit: every hash is compared.
		if subtle.ConstantTimeCompare(sum[:], k.Hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, ErrUnauthenticated
	}
	k := kr.keys[found]
	if lim := kr.limiters[found]; lim != nil {
		now := kr.now()
		r := lim.ReserveN(now, 1)
		if !r.OK() {
			return Principal{}, &RateLimitError{RetryAfter: time.Second}
		}
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return Principal{}, &RateLimitError{RetryAfter: d}
		}
	}
	return Principal{KeyID: k.ID, key: k}, nil
}

// Authorize reports whether p may use scope on namespace. The error wraps
// ErrForbidden. The anonymous principal of an open Keyring may do
// everything.
func (p Principal) Authorize(namespace string, scope Scope) error {
	if p.KeyID == Anonymous && p.key == nil {
		return nil
	}
	if p.key == nil || !p.key.Allows(namespace, scope) {
		return fmt.Errorf("%w: %s on namespace %q", ErrForbidden, scope, namespace)
	}
	return nil
}

// RateLimitError is returned when a key is over its rate. It wraps
// ErrRateLimited.
type RateLimitError struct {
	// RetryAfter is when the key may send its next request.
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%s; retry after %s", ErrRateLimited, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// RetryAfterSeconds returns RetryAfter rounded up to whole seconds, at
// least 1, for a Retry-After header.
func (e *RateLimitError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header value, or "" when the value has another form.
func BearerToken(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal that NewContext stored, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
