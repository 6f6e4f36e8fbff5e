package service_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dapr "github.com/dapr/go-sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// daprNamespaces declares a text-keyed namespace called statestore, the
// store name Dapr's examples use, beside the default widgets.
func daprNamespaces() string {
	return harness.NamespacesYAML(
		harness.Namespace("statestore", "dapr_state", "text", harness.Writable()...),
		harness.Namespace("widgets", "widgets", "bigint", harness.Writable()...),
		harness.Namespace("readonly", "widgets", "bigint", harness.Lifetimes()...),
	)
}

// startDapr migrates a fresh database with the Dapr test namespaces and
// serves warmcache with the Dapr state API on free ports. extra adds
// environment variables.
func startDapr(t *testing.T, extra map[string]string) served {
	t.Helper()
	file := harness.WriteFile(t, "namespaces.yaml", daprNamespaces())
	dsn := testenv.NewDatabase(t)
	var out, errOut bytes.Buffer
	env := map[string]string{"WARMCACHE_POSTGRES_DSN": dsn, "WARMCACHE_NAMESPACES_FILE": file}
	if err := run(context.Background(), []string{"migrate", "up"}, env, &out, &errOut); err != nil {
		t.Fatalf("migrate up: %v\n%s%s", err, out.String(), errOut.String())
	}
	env["WARMCACHE_REDIS_ADDRS"] = testenv.RedisAddr(t)
	env["WARMCACHE_REDIS_PREFIX"] = "dapr-" + testenv.RandomSuffix(t) + ":"
	env["WARMCACHE_HOT_TIMEOUT"] = "1s"
	for k, v := range extra {
		env[k] = v
	}
	// HTTP, gRPC, the two Dapr listeners, and without keys the open-access
	// notice.
	want := 5
	if env["WARMCACHE_KEYS_FILE"] != "" {
		want = 4
	}
	s := startServing(t, env, want, "--dapr-http-addr", "127.0.0.1:0", "--dapr-grpc-addr", "127.0.0.1:0")
	if s.daprHTTP == "" || s.daprGRPC == "" {
		t.Fatalf("the Dapr listeners were not announced: %q", s.lines)
	}
	return s
}

// daprClient connects the Dapr Go SDK to addr by its own address setting.
func daprClient(t *testing.T, addr string) dapr.Client {
	t.Helper()
	c, err := dapr.NewClientWithAddress(addr)
	if err != nil {
		t.Fatalf("dapr.NewClientWithAddress(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// wantStatus checks that err carries the gRPC code want and a message that
// contains text.
func wantStatus(t *testing.T, what string, err error, want codes.Code, text string) {
	t.Helper()
	st, ok := status.FromError(errors.Unwrap(err))
	if !ok {
		st, ok = status.FromError(err)
	}
	if !ok || st.Code() != want || !strings.Contains(st.Message(), text) {
		t.Fatalf("%s: err = %v; want code %s with %q", what, err, want, text)
	}
}

func TestDaprGoSDK(t *testing.T) {
	s := startDapr(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := daprClient(t, s.daprGRPC)
	const store = "statestore"

	t.Run("save get delete", func(t *testing.T) {
		if err := c.SaveState(ctx, store, "order-1", []byte(`{"qty": 1}`), nil); err != nil {
			t.Fatalf("SaveState: %v", err)
		}
		it, err := c.GetState(ctx, store, "order-1", nil)
		if err != nil || string(it.Value) != `{"qty": 1}` || it.Etag == "" {
			t.Fatalf("GetState = %+v, %v; want the saved value with an ETag", it, err)
		}
		// The SDK's GetState asks for strong consistency: a warehouse read.
		if it.Metadata["warmcache-source"] != "miss" {
			t.Errorf("strong GetState came from %q, want the warehouse (miss)", it.Metadata["warmcache-source"])
		}
		ev, err := c.GetStateWithConsistency(ctx, store, "order-1", nil, dapr.StateConsistencyEventual)
		if err != nil || ev.Etag != it.Etag || ev.Metadata["warmcache-source"] != "hit" {
			t.Fatalf("eventual GetState = %+v, %v; want a cache hit at ETag %s", ev, err, it.Etag)
		}
		if err := c.DeleteState(ctx, store, "order-1", nil); err != nil {
			t.Fatalf("DeleteState: %v", err)
		}
		gone, err := c.GetState(ctx, store, "order-1", nil)
		if err != nil || gone.Value != nil || gone.Etag != "" {
			t.Fatalf("GetState after delete = %+v, %v; want an empty item", gone, err)
		}
		if err := c.DeleteState(ctx, store, "order-1", nil); err != nil {
			t.Fatalf("DeleteState of an absent key: %v; want no error, as Dapr stores answer", err)
		}
	})

	t.Run("etag conflicts", func(t *testing.T) {
		if err := c.SaveState(ctx, store, "acct", []byte(`{"balance": 10}`), nil); err != nil {
			t.Fatal(err)
		}
		v1, err := c.GetState(ctx, store, "acct", nil)
		if err != nil {
			t.Fatal(err)
		}
		firstWrite := dapr.WithConcurrency(dapr.StateConcurrencyFirstWrite)
		if err := c.SaveStateWithETag(ctx, store, "acct", []byte(`{"balance": 20}`), v1.Etag, nil, firstWrite); err != nil {
			t.Fatalf("SaveStateWithETag at the current ETag: %v", err)
		}
		err = c.SaveStateWithETag(ctx, store, "acct", []byte(`{"balance": 30}`), v1.Etag, nil, firstWrite)
		wantStatus(t, "first-write save at a stale ETag", err, codes.Aborted, "possible etag mismatch")
		err = c.DeleteStateWithETag(ctx, store, "acct", &dapr.ETag{Value: v1.Etag}, nil,
			&dapr.StateOptions{Concurrency: dapr.StateConcurrencyFirstWrite})
		wantStatus(t, "first-write delete at a stale ETag", err, codes.Aborted, "possible etag mismatch")
		err = c.SaveStateWithETag(ctx, store, "acct", []byte(`{}`), "not-a-version", nil, firstWrite)
		wantStatus(t, "an ETag that is no version", err, codes.InvalidArgument, "invalid etag value")

		now, err := c.GetState(ctx, store, "acct", nil)
		if err != nil || string(now.Value) != `{"balance": 20}` {
			t.Fatalf("after the conflicts GetState = %+v, %v; want balance 20", now, err)
		}
		// last-write holds the ETag too, as state.postgresql does.
		lastWrite := dapr.WithConcurrency(dapr.StateConcurrencyLastWrite)
		err = c.SaveStateWithETag(ctx, store, "acct", []byte(`{"balance": 40}`), v1.Etag, nil, lastWrite)
		wantStatus(t, "last-write save at a stale ETag", err, codes.Aborted, "possible etag mismatch")
		err = c.DeleteStateWithETag(ctx, store, "acct", &dapr.ETag{Value: v1.Etag}, nil,
			&dapr.StateOptions{Concurrency: dapr.StateConcurrencyLastWrite})
		wantStatus(t, "last-write delete at a stale ETag", err, codes.Aborted, "possible etag mismatch")
		// first-write without an ETag only creates.
		err = c.SaveState(ctx, store, "acct", []byte(`{"balance": 50}`), nil, firstWrite)
		wantStatus(t, "first-write create of an existing key", err, codes.Aborted, "exists")
		if err := c.SaveState(ctx, store, "fresh-acct", []byte(`{"balance": 1}`), nil, firstWrite); err != nil {
			t.Fatalf("first-write create of a new key: %v", err)
		}
		cur, err := c.GetState(ctx, store, "acct", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteStateWithETag(ctx, store, "acct", &dapr.ETag{Value: cur.Etag}, nil,
			&dapr.StateOptions{Concurrency: dapr.StateConcurrencyFirstWrite}); err != nil {
			t.Fatalf("delete at the current ETag: %v", err)
		}
	})

	t.Run("bulk", func(t *testing.T) {
		items := []*dapr.SetStateItem{
			{Key: "b1", Value: []byte(`{"n": 1}`)},
			{Key: "b2", Value: []byte(`{"n": 2}`)},
			{Key: "b3", Value: []byte(`{"n": 3}`)},
		}
		if err := c.SaveBulkState(ctx, store, items...); err != nil {
			t.Fatalf("SaveBulkState: %v", err)
		}
		got, err := c.GetBulkState(ctx, store, []string{"b1", "b2", "missing", "b3", "b1"}, nil, 4)
		if err != nil || len(got) != 5 {
			t.Fatalf("GetBulkState = %d items, %v; want 5", len(got), err)
		}
		for i, want := range []string{`{"n": 1}`, `{"n": 2}`, ``, `{"n": 3}`, `{"n": 1}`} {
			if string(got[i].Value) != want || (want != "" && got[i].Etag == "") || (want == "" && got[i].Etag != "") {
				t.Errorf("item %d (%s) = %q etag %q; want %q", i, got[i].Key, got[i].Value, got[i].Etag, want)
			}
		}
		if err := c.DeleteBulkState(ctx, store, []string{"b1", "b2", "never-there"}, nil); err != nil {
			t.Fatalf("DeleteBulkState: %v", err)
		}
		left, err := c.GetBulkState(ctx, store, []string{"b1", "b2", "b3"}, nil, 1)
		if err != nil || left[0].Value != nil || left[1].Value != nil || string(left[2].Value) != `{"n": 3}` {
			t.Fatalf("after DeleteBulkState: %+v, %v; want only b3", left, err)
		}
	})

	t.Run("transaction", func(t *testing.T) {
		if err := c.SaveState(ctx, store, "tx-old", []byte(`"old"`), nil); err != nil {
			t.Fatal(err)
		}
		ops := []*dapr.StateOperation{
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "tx-a", Value: []byte(`{"a": 1}`)}},
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "tx-b", Value: []byte(`{"b": 1}`)}},
			{Type: dapr.StateOperationTypeDelete, Item: &dapr.SetStateItem{Key: "tx-old"}},
		}
		if err := c.ExecuteStateTransaction(ctx, store, nil, ops); err != nil {
			t.Fatalf("ExecuteStateTransaction: %v", err)
		}
		got, err := c.GetBulkState(ctx, store, []string{"tx-a", "tx-b", "tx-old"}, nil, 1)
		if err != nil || string(got[0].Value) != `{"a": 1}` || string(got[1].Value) != `{"b": 1}` || got[2].Value != nil {
			t.Fatalf("after the transaction: %+v, %v", got, err)
		}

		// A transaction whose last op fails its ETag writes nothing.
		a, err := c.GetState(ctx, store, "tx-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		stale := &dapr.ETag{Value: "1"}
		firstWrite := &dapr.StateOptions{Concurrency: dapr.StateConcurrencyFirstWrite}
		bad := []*dapr.StateOperation{
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "tx-a", Value: []byte(`{"a": 2}`), Etag: &dapr.ETag{Value: a.Etag}, Options: firstWrite}},
			{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "tx-c", Value: []byte(`{"c": 1}`)}},
			{Type: dapr.StateOperationTypeDelete, Item: &dapr.SetStateItem{Key: "tx-b", Etag: stale, Options: firstWrite}},
		}
		err = c.ExecuteStateTransaction(ctx, store, nil, bad)
		wantStatus(t, "a transaction with a stale ETag", err, codes.Internal, "possible etag mismatch")
		after, err := c.GetBulkState(ctx, store, []string{"tx-a", "tx-b", "tx-c"}, nil, 1)
		if err != nil || string(after[0].Value) != `{"a": 1}` || after[0].Etag != a.Etag ||
			string(after[1].Value) != `{"b": 1}` || after[2].Value != nil {
			t.Fatalf("after the failed transaction: %+v, %v; want nothing changed", after, err)
		}
	})

	t.Run("ttlInSeconds", func(t *testing.T) {
		before := time.Now()
		if err := c.SaveState(ctx, store, "ttl", []byte(`{}`), map[string]string{"ttlInSeconds": "60"}); err != nil {
			t.Fatalf("SaveState with ttlInSeconds 60: %v", err)
		}
		it, err := c.GetStateWithConsistency(ctx, store, "ttl", nil, dapr.StateConsistencyEventual)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := time.Parse(time.RFC3339, it.Metadata["ttlExpireTime"])
		if err != nil || exp.Before(before.Add(58*time.Second)) || exp.After(time.Now().Add(61*time.Second)) {
			t.Errorf("GetState metadata ttlExpireTime %q (%v), want about a minute from %v", it.Metadata["ttlExpireTime"], err, before)
		}
		if err := c.SaveState(ctx, store, "ttl", []byte(`{}`), map[string]string{"ttlInSeconds": "-1"}); err != nil {
			t.Fatalf("ttlInSeconds -1 (never expire): %v", err)
		}
		if it, err := c.GetStateWithConsistency(ctx, store, "ttl", nil, dapr.StateConsistencyEventual); err != nil || it.Metadata["ttlExpireTime"] != "" {
			t.Errorf("after a save with ttlInSeconds -1, GetState = %+v, %v; want no ttlExpireTime", it, err)
		}
		err = c.SaveState(ctx, store, "ttl", []byte(`{}`), map[string]string{"ttlInSeconds": "soon"})
		wantStatus(t, "ttlInSeconds that is not a number", err, codes.InvalidArgument, "ttlInSeconds")
	})

	t.Run("a value over the bound", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 2<<20)
		big[0], big[len(big)-1] = '"', '"'
		err := c.SaveState(ctx, store, "big", big, nil)
		wantStatus(t, "a 2 MiB value", err, codes.InvalidArgument, "larger than 1048576 bytes")
	})

	t.Run("what is not supported", func(t *testing.T) {
		err := c.SaveState(ctx, store, "bytes", []byte("plain text"), nil)
		wantStatus(t, "a value that is not JSON", err, codes.InvalidArgument, "not valid JSON")
		_, err = c.GetState(ctx, "nostore", "k", nil)
		wantStatus(t, "an unknown store", err, codes.InvalidArgument, "state store nostore is not found")
		err = c.SaveState(ctx, "readonly", "1", []byte(`{}`), nil)
		wantStatus(t, "a read-only namespace", err, codes.FailedPrecondition, "read-only")
		_, err = c.GetState(ctx, "widgets", "not-a-number", nil)
		wantStatus(t, "a key the namespace cannot hold", err, codes.InvalidArgument, "not a 64-bit integer")
		_, err = c.QueryStateAlpha1(ctx, store, `{"filter":{}}`, nil)
		wantStatus(t, "QueryStateAlpha1", err, codes.Unimplemented, "only Dapr's state API")
		err = c.PublishEvent(ctx, "pubsub", "topic", []byte(`{}`))
		wantStatus(t, "PublishEvent", err, codes.Unimplemented, "PublishEvent is not served")
	})
}

func TestDaprGoSDKAPIToken(t *testing.T) {
	token := "app-" + testenv.RandomSuffix(t) + testenv.RandomSuffix(t)
	keysFile := harness.WriteFile(t, "keys.yaml",
		harness.KeysYAML(harness.APIKey{ID: "app", Token: token, Scopes: "[read, write]", Namespaces: "[statestore]"}))
	s := startDapr(t, map[string]string{"WARMCACHE_KEYS_FILE": keysFile})
	ctx := context.Background()
	c := daprClient(t, s.daprGRPC)
	_, err := c.GetState(ctx, "statestore", "k", nil)
	wantStatus(t, "no dapr-api-token", err, codes.Unauthenticated, "dapr-api-token")

	// DAPR_API_TOKEN is how a Dapr application sends its token.
	t.Setenv("DAPR_API_TOKEN", token)
	authed := daprClient(t, s.daprGRPC)
	if err := authed.SaveState(ctx, "statestore", "k", []byte(`{"ok": true}`), nil); err != nil {
		t.Fatalf("SaveState with the app's token: %v", err)
	}
	it, err := authed.GetState(ctx, "statestore", "k", nil)
	if err != nil || string(it.Value) != `{"ok": true}` {
		t.Fatalf("GetState with the token = %+v, %v", it, err)
	}
	_, err = authed.GetState(ctx, "widgets", "1", nil)
	wantStatus(t, "a store the key does not cover", err, codes.PermissionDenied, "not allowed")
}

// nodeCheck is the folder of the @dapr/dapr check; `make test` installs
// its packages with npm ci.
const nodeCheck = "testdata/node"

func TestDaprJavaScriptSDKOverHTTP(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(nodeCheck, "node_modules", "@dapr", "dapr", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node or @dapr/dapr missing (run npm ci in %s): %v", nodeCheck, err)
		}
		t.Skipf("node or @dapr/dapr missing (run npm ci in %s): %v", nodeCheck, err)
	}
	s := startDapr(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.js")
	cmd.Dir = nodeCheck
	cmd.Env = append(os.Environ(), "DAPR_HTTP_ENDPOINT="+s.daprHTTP, "STORE=statestore")
	out, err := cmd.CombinedOutput()
	t.Logf("node check.js:\n%s", out)
	if err != nil {
		t.Fatalf("the @dapr/dapr checks failed: %v", err)
	}
	if !strings.Contains(string(out), " passed, 0 failed") {
		t.Fatalf("the @dapr/dapr checks did not report their result")
	}
}

// TestDaprExampleProgram builds cmd/dapr-example and runs it against
// warmcache, found through DAPR_GRPC_ENDPOINT as Dapr applications find
// their sidecar.
func TestDaprExampleProgram(t *testing.T) {
	bin := testproc.Build(t, "github.com/warmcache/warmcache/cmd/dapr-example")
	s := startDapr(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-store", "statestore")
	cmd.Env = append(os.Environ(), "DAPR_GRPC_ENDPOINT="+s.daprGRPC)
	out, err := cmd.CombinedOutput()
	t.Logf("dapr-example:\n%s", out)
	if err != nil {
		t.Fatalf("dapr-example: %v", err)
	}
	for _, want := range []string{`order-100 = {"qty": 1, "item": "book"}`, "possible etag mismatch",
		`stock-book = {"left": 9}`, `reserved-order-100 = {"qty": 2}`, "deleted"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}
