package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/memtier"
)

func mustHash(t *testing.T, token string) [32]byte {
	t.Helper()
	h, err := auth.ParseHash(auth.HashToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newKeyring(t *testing.T, c *memtier.Clock) *auth.Keyring {
	t.Helper()
	kr, err := auth.NewKeyring([]auth.Key{
		{ID: "reader", Hash: mustHash(t, "read-token"), Scopes: auth.ScopeRead, Namespaces: []string{"widgets"}},
		{ID: "writer", Hash: mustHash(t, "write-token"), Scopes: auth.ScopeRead | auth.ScopeWrite, Namespaces: []string{"*"}},
		{ID: "limited", Hash: mustHash(t, "limited-token"), Scopes: auth.ScopeRead, Namespaces: []string{"widgets"}, Rate: 0.5, Burst: 2},
	}, auth.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestAuthenticateAndAuthorize(t *testing.T) {
	kr := newKeyring(t, memtier.NewClockAt(time.Unix(1000, 0)))
	cases := []struct {
		name      string
		token     string
		namespace string
		scope     auth.Scope
		want      error
		wantID    string
	}{
		{"no token", "", "widgets", auth.ScopeRead, auth.ErrUnauthenticated, ""},
		{"wrong token", "nope", "widgets", auth.ScopeRead, auth.ErrUnauthenticated, ""},
		{"token that is a stored hash", auth.HashToken("read-token"), "widgets", auth.ScopeRead, auth.ErrUnauthenticated, ""},
		{"reader reads", "read-token", "widgets", auth.ScopeRead, nil, "reader"},
		{"reader writes", "read-token", "widgets", auth.ScopeWrite, auth.ErrForbidden, "reader"},
		{"reader on another namespace", "read-token", "orders", auth.ScopeRead, auth.ErrForbidden, "reader"},
		{"wildcard writer", "write-token", "orders", auth.ScopeWrite, nil, "writer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := kr.Authenticate(c.token)
			if err == nil {
				err = p.Authorize(c.namespace, c.scope)
			}
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if p.KeyID != c.wantID {
				t.Errorf("KeyID = %q, want %q", p.KeyID, c.wantID)
			}
			if err != nil && strings.Contains(err.Error(), "token") {
				t.Errorf("error %q mentions the token", err)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	c := memtier.NewClockAt(time.Unix(1000, 0))
	kr := newKeyring(t, c)
	for i := range 2 {
		if _, err := kr.Authenticate("limited-token"); err != nil {
			t.Fatalf("request %d within the burst: %v", i, err)
		}
	}
	_, err := kr.Authenticate("limited-token")
	var rl *auth.RateLimitError
	if !errors.As(err, &rl) || !errors.Is(err, auth.ErrRateLimited) {
		t.Fatalf("third request: err = %v, want a RateLimitError", err)
	}
	if rl.RetryAfter <= 0 || rl.RetryAfter > 2*time.Second || rl.RetryAfterSeconds() != 2 {
		t.Fatalf("RetryAfter = %v (%ds), want 2s at 0.5/s", rl.RetryAfter, rl.RetryAfterSeconds())
	}
	if _, err := kr.Authenticate("read-token"); err != nil {
		t.Fatalf("another key is limited too: %v", err)
	}
	c.Advance(2 * time.Second)
	if _, err := kr.Authenticate("limited-token"); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
}

func TestOpenKeyringLetsEverythingThrough(t *testing.T) {
	kr, err := auth.NewKeyring(nil, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := kr.Authenticate("")
	if err != nil || !kr.Open() || p.KeyID != auth.Anonymous || p.Authorize("any", auth.ScopeWrite) != nil {
		t.Fatalf("open keyring: principal %+v, err %v", p, err)
	}
	var zero auth.Principal
	if !errors.Is(zero.Authorize("any", auth.ScopeRead), auth.ErrForbidden) {
		t.Fatal("the zero principal is allowed")
	}
}

func TestNewKeyringRefusesBadKeys(t *testing.T) {
	h := [32]byte{1}
	cases := []struct {
		name string
		keys []auth.Key
		want string
	}{
		{"bad id", []auth.Key{{ID: "a b", Hash: h, Scopes: auth.ScopeRead, Namespaces: []string{"*"}}}, "id"},
		{"reserved id", []auth.Key{{ID: auth.Anonymous, Hash: h, Scopes: auth.ScopeRead, Namespaces: []string{"*"}}}, "reserved"},
		{"duplicate hash", []auth.Key{
			{ID: "a", Hash: h, Scopes: auth.ScopeRead, Namespaces: []string{"*"}},
			{ID: "b", Hash: h, Scopes: auth.ScopeRead, Namespaces: []string{"*"}}}, "same hash"},
		{"no scope", []auth.Key{{ID: "a", Hash: h, Namespaces: []string{"*"}}}, "scopes"},
		{"no namespace", []auth.Key{{ID: "a", Hash: h, Scopes: auth.ScopeRead}}, "namespaces"},
		{"missing hash", []auth.Key{{ID: "a", Scopes: auth.ScopeRead, Namespaces: []string{"*"}}}, "sha256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := auth.NewKeyring(c.keys, auth.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":  "abc",
		"bearer  abc": "abc",
		"Basic abc":   "",
		"abc":         "",
		"":            "",
	} {
		if got := auth.BearerToken(in); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", in, got, want)
		}
	}
}

// The audit log shows at most MaxLoggedKeyBytes of a key, with its length,
// however long the key a client sent.
func TestAuditLogClipsKeys(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	long := strings.Repeat("é", 5000) // 10,000 bytes
	auth.Principal{KeyID: "k1"}.LogWrite(context.Background(), log, "http", "put", long, long, nil)
	var rec struct{ Namespace, Key string }
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	for _, got := range []string{rec.Key, rec.Namespace} {
		if len(got) > auth.MaxLoggedKeyBytes+32 || !strings.HasSuffix(got, "...(10000 bytes)") || !utf8.ValidString(got) {
			t.Fatalf("logged key of %d bytes: %q", len(got), got)
		}
	}
}
