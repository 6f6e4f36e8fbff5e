package advise_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/advise"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func blobs() schema.Table {
	return schema.Table{Namespace: &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "blob", VersionColumn: "version"}, Managed: true,
		Storage: schema.Storage{Partitions: 2, Compression: "lz4"}}
}

// TestBytesCandidatesGolden pins the candidates of a bytes namespace on
// each dialect: the bytes layout in every storage, and bytea with a zstd
// dictionary, none with _query, and no JSON candidate.
func TestBytesCandidatesGolden(t *testing.T) {
	for _, d := range []dialect.Dialect{dialect.Postgres, dialect.Greenplum} {
		t.Run(d.String(), func(t *testing.T) {
			tb := blobs()
			cands := advise.Candidates(d, tb, nil)
			var b strings.Builder
			for i, c := range cands {
				fmt.Fprintf(&b, "%d %s | layout %s value %s query %s migratable %v storage %+v\n",
					i, c.Name, c.Layout, c.Value, c.Query, c.Migratable, c.Storage)
				if c.Query != advise.QueryNone || c.Value == advise.ValueJSONB || c.Value == advise.ValueJSON {
					t.Errorf("candidate %s of a bytes namespace: value %s, query %s", c.Name, c.Value, c.Query)
				}
			}
			fmt.Fprintf(&b, "current: %d\n", advise.Current(d, tb, cands))
			for i, c := range cands {
				cns := *tb.Namespace
				cns.Name, cns.Table, cns.Layout, cns.Columns = fmt.Sprintf("c%d", i), fmt.Sprintf("s.c%d", i), c.Layout, c.Columns
				if _, err := schema.Plan(d, []schema.Table{{Namespace: &cns, Managed: true, Storage: c.Storage}}); err != nil {
					t.Errorf("candidate %s: %v", c.Name, err)
				}
			}
			golden.Check(t, "candidates_bytes_"+d.String(), []byte(b.String()))
		})
	}
}

// TestRunBytes measures the candidates of a bytes namespace whose values
// hold every byte value, on both dialects.
func TestRunBytes(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			dsn := w.NewDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			distributed := ""
			if w.Greenplum {
				distributed = " DISTRIBUTED BY (key)"
			}
			// Each value: a header, the key, and the bytes 0x00-0xFF.
			_, err = conn.Exec(ctx, `
CREATE TABLE blobs (key text PRIMARY KEY, blob bytea NOT NULL, version bigint NOT NULL)`+distributed+`;
INSERT INTO blobs SELECT 'k' || g, '\x89504e470d0a1a0a'::bytea || convert_to(g::text, 'UTF8') ||
	(SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea ORDER BY b) FROM generate_series(0, 255) b), g
FROM generate_series(1, 400) g;`)
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			r, err := advise.Run(ctx, blobs(), advise.Options{Store: pgstore.Options{DSN: dsn}, SampleRows: 300, Lookups: 100}, log)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := 4
			if w.Greenplum {
				want = 10
			}
			if r.Rows != 300 || len(r.Results) != want || r.AvgValueBytes < 256 {
				t.Fatalf("Run sampled %d rows (%d bytes on average) into %d candidates, want 300 (over 256 bytes) into %d", r.Rows, r.AvgValueBytes, len(r.Results), want)
			}
			for _, res := range r.Results {
				if res.Err != nil || res.Bytes <= 0 || res.P50 <= 0 {
					t.Errorf("%s: %+v", res.Name, res)
				}
			}
			if r.Recommended < 0 || r.Results[r.Recommended].Layout != warmcache.LayoutBytes {
				t.Errorf("recommended %d, want a bytes candidate", r.Recommended)
			}
			var out bytes.Buffer
			if err := r.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "bytes, ") || !strings.Contains(out.String(), "packed bytea+zstd-dict") {
				t.Errorf("report lacks the bytes candidates:\n%s", out.String())
			}
		})
	}
}
