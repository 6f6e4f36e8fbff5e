package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// These tests run the program's flags and run without any server. The
// tests that start servers, and run every subcommand against them, are in
// e2e/ (see e2e/README.md).

// getenv returns a lookup over m in which WARMCACHE_FRESHNESS is off unless
// m sets it.
func getenv(m map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		if k == "WARMCACHE_FRESHNESS" {
			return "off"
		}
		return ""
	}
}

func TestMigratePlanNeedsNoServer(t *testing.T) {
	var out, errOut bytes.Buffer
	env := getenv(map[string]string{"WARMCACHE_POSTGRES_DSN": "postgres://nobody@127.0.0.1:1/none"})
	if err := run(context.Background(), []string{"migrate", "plan", "--dialect", "greenplum"}, env, &out, &errOut); err != nil {
		t.Fatalf("migrate plan: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"DISTRIBUTED BY", "CREATE SEQUENCE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
}

func TestOpenAccessRefusedOffLoopback(t *testing.T) {
	cases := []struct{ name, flag, addr string }{
		{"http on all interfaces", "--http-addr", "0.0.0.0:0"},
		{"grpc on all interfaces", "--grpc-addr", ":0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"serve", c.flag, c.addr}, getenv(nil), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), "no API keys") || !strings.Contains(err.Error(), c.flag[2:]) {
				t.Fatalf("serve = %v, want a refusal naming %s and the missing keys", err, c.flag)
			}
			if strings.Contains(out.String(), "serving") {
				t.Fatalf("printed %q before refusing", out.String())
			}
		})
	}
}

// TestUsage checks what run says without a command, with help and with an
// unknown command.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // empty: no error
		toOut   bool   // the usage goes to stdout, not stderr
	}{
		{"no command", nil, "no command given", false},
		{"help", []string{"help"}, "", true},
		{"-h", []string{"-h"}, "", true},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, getenv(nil), &out, &errOut)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("run(%q) = %v, want error %q", tc.args, err, tc.wantErr)
			}
			usageOn, other := &errOut, &out
			if tc.toOut {
				usageOn, other = &out, &errOut
			}
			if !strings.HasPrefix(usageOn.String(), "usage: warmcache <command>") || other.Len() != 0 {
				t.Fatalf("run(%q) printed %q on the usage's stream and %q on the other", tc.args, usageOn.String(), other.String())
			}
		})
	}
}
