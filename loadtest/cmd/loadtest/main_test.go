package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warmcache/warmcache/internal/localstack"
)

// The harness itself needs the local stack and minutes of load, so it
// never runs under go test; these cover its pure helpers.

func TestFloorAnswersItsConstantBody(t *testing.T) {
	for _, size := range []int{40, 460, 1000} {
		body := floorBody(size)
		if len(body) != size {
			t.Fatalf("floorBody(%d) has %d bytes", size, len(body))
		}
		srv := httptest.NewServer(newFloorHandler(body))
		resp, err := http.Get(srv.URL + "/v1/kv/widgets/42")
		if err != nil {
			srv.Close()
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(got) != string(body) || resp.Header.Get("X-Cache") != "floor" {
			t.Fatalf("size %d: status %d, X-Cache %q, body %d bytes (err %v)", size, resp.StatusCode, resp.Header.Get("X-Cache"), len(got), err)
		}
	}
}

func TestRequireLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:5432", true},
		{"127.3.4.5:1", true},
		{"[::1]:6379", true},
		{"localhost:6432", true},
		{"10.0.0.1:5432", false},
		{"example.com:80", false},
		{":6379", false},
		{"127.0.0.1", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if err := requireLoopback(tc.addr); (err == nil) != tc.ok {
				t.Errorf("requireLoopback(%q) = %v, want ok %v", tc.addr, err, tc.ok)
			}
		})
	}
}

func TestOptionsRefuseNonLoopbackTargets(t *testing.T) {
	if _, err := parseOptions([]string{"-redis", "192.168.1.10:6379"}, localstack.Config{}, io.Discard); err == nil {
		t.Fatal("parseOptions accepted a non-loopback Redis")
	}
	o, err := parseOptions([]string{"-near-env", "WARMCACHE_NEAR_CACHE_BYTES=1048576", "-duration", "2s"}, localstack.Config{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.NearEnv) != 1 || o.NearEnv[0] != "WARMCACHE_NEAR_CACHE_BYTES=1048576" {
		t.Errorf("NearEnv = %q; the flag should replace the default", o.NearEnv)
	}
	if o.Command != "make bench BENCHFLAGS='-duration=2s -near-env=WARMCACHE_NEAR_CACHE_BYTES=1048576'" {
		t.Errorf("Command = %q", o.Command)
	}
}

func TestOptionsDefaultToTheLocalStack(t *testing.T) {
	stack := localstack.Config{PostgresPort: 15432, PgBouncerPort: 16432, RedisPort: 16379}
	o, err := parseOptions(nil, stack, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.PGHost != "127.0.0.1:15432" || o.PGBouncer != "127.0.0.1:16432" || o.RedisAddr != "127.0.0.1:16379" {
		t.Errorf("servers = %s, %s, %s; want the stack's 127.0.0.1:15432, :16432, :16379", o.PGHost, o.PGBouncer, o.RedisAddr)
	}
}

func TestOptionsCommandQuotesValuesWithSpaces(t *testing.T) {
	o, err := parseOptions([]string{"-before-label", "main at abc", "-duration", "2s"}, localstack.Config{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := `make bench BENCHFLAGS='-before-label="main at abc" -duration=2s'`; o.Command != want {
		t.Errorf("Command = %q, want %q", o.Command, want)
	}
}
