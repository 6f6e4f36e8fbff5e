package dialect_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
)

func TestParseAndString(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want dialect.Dialect
	}{
		{"postgres", dialect.Postgres},
		{"postgresql", dialect.Postgres},
		{"greenplum", dialect.Greenplum},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := dialect.Parse(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if !got.Valid() {
				t.Errorf("%v.Valid() = false", got)
			}
			if back, err := dialect.Parse(got.String()); err != nil || back != got {
				t.Errorf("Parse(%q) = %v, %v; want %v", got.String(), back, err, got)
			}
		})
	}
	if _, err := dialect.Parse("mysql"); err == nil {
		t.Error("Parse(mysql) succeeded")
	}
	if dialect.Dialect(0).Valid() {
		t.Error("the zero Dialect is valid")
	}
}

func TestDistributedBy(t *testing.T) {
	if got := dialect.Postgres.DistributedBy("key"); got != "" {
		t.Errorf("Postgres.DistributedBy = %q, want none", got)
	}
	if got, want := dialect.Greenplum.DistributedBy("version", "scope"), "DISTRIBUTED BY (version, scope)"; got != want {
		t.Errorf("Greenplum.DistributedBy = %q, want %q", got, want)
	}
}

func TestSessionSettings(t *testing.T) {
	got := dialect.SessionSettings("")
	want := []string{"SET optimizer = off", "SET gp_enable_direct_dispatch = on", "SET plan_cache_mode = auto", "SET statement_mem = '10MB'"}
	if !slices.Equal(got, want) {
		t.Errorf("SessionSettings(\"\") = %q, want %q", got, want)
	}
	if got := dialect.SessionSettings("it's"); !strings.HasSuffix(got[len(got)-1], "'it''s'") {
		t.Errorf("statement_mem is not quoted as a literal: %q", got[len(got)-1])
	}
	if got, want := dialect.SettingNames(dialect.LookupSettings()), []string{"optimizer", "gp_enable_direct_dispatch", "plan_cache_mode"}; !slices.Equal(got, want) {
		t.Errorf("SettingNames(LookupSettings()) = %q, want %q", got, want)
	}
}

func TestCompressLevel(t *testing.T) {
	for _, tt := range []struct {
		c       string
		level   int
		want    int
		wantErr bool
	}{
		{dialect.CompressZstd, 0, 3, false},
		{dialect.CompressZstd, 19, 19, false},
		{dialect.CompressZstd, 20, 0, true},
		{dialect.CompressZlib, 0, 5, false},
		{dialect.CompressZlib, 10, 0, true},
		{dialect.CompressRLE, 0, 1, false},
		{dialect.CompressRLE, 4, 4, false},
		{dialect.CompressRLE, 5, 0, true},
		{dialect.CompressLZ4, 0, 0, true},
	} {
		got, err := dialect.CompressLevel(tt.c, tt.level)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("CompressLevel(%s, %d) = %d, %v; want %d, error %v", tt.c, tt.level, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCompressionKinds(t *testing.T) {
	for _, c := range dialect.Compressions() {
		if !dialect.ValidCompression(c) {
			t.Errorf("ValidCompression(%s) = false", c)
		}
		if c != dialect.CompressNone && dialect.TOAST(c) == dialect.Block(c) {
			t.Errorf("%s is both or neither TOAST and block compression", c)
		}
	}
	if dialect.ValidCompression("") || dialect.ValidCompression("brotli") {
		t.Error("ValidCompression accepts an unknown compression")
	}
}
