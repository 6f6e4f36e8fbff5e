package pgstore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	migrations "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/warmcache/tiertest"
)

// bytesValues are the values every bytes test round-trips: each byte
// 0x00-0xFF, 1 MiB of random bytes, no bytes, and bytes that read as JSON,
// as bytea's hex text and as bytea's escape text, which must come back as
// written, not decoded.
func bytesValues() map[string][]byte {
	v := tiertest.OpaqueValues()
	v["json"] = []byte(`{"a": 1}`)
	v["hex-text"] = []byte(`\x41`)
	v["escape"] = []byte(`\\\101`)
	return v
}

// checkBytes writes each of bytesValues under its own key and reads it
// back with Lookup and LookupMany, then rewrites one with If-Match; a
// bulk load and a containment query are refused as client errors. With
// blockBound (Greenplum's append-optimized row tables, whose rows must fit
// one 32 KiB block) the 1 MiB value is refused as too large, and one of
// 32,000 bytes round-trips instead.
func checkBytes(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace, blockBound bool) {
	ctx := testContext(t)
	values := bytesValues()
	if blockBound {
		if _, err := s.Put(ctx, ns, key(t, ns, "1MiB"), values["1MiB"], nil); !errors.Is(err, warmcache.ErrTooLarge) {
			t.Fatalf("Put of 1 MiB into an append-optimized row table = %v, want ErrTooLarge", err)
		}
		if got, err := s.Lookup(ctx, ns, key(t, ns, "1MiB")); err != nil || got.Found {
			t.Fatalf("Lookup after the refused Put = %+v, %v; want absent", got.Found, err)
		}
		values["32000"] = values["1MiB"][:32000]
		delete(values, "1MiB")
	}
	var keys []warmcache.Key
	var want [][]byte
	for name, v := range values {
		k := key(t, ns, name)
		e, err := s.Put(ctx, ns, k, v, nil)
		if err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
		if !bytes.Equal(e.Value, v) {
			t.Fatalf("Put %s returned %d bytes, want the %d written", name, len(e.Value), len(v))
		}
		got, err := s.Lookup(ctx, ns, k)
		if err != nil || !got.Found || !bytes.Equal(got.Value, v) || got.Version != e.Version {
			t.Fatalf("Lookup %s = %d bytes (found %v, version %d), %v; want the %d written at version %d",
				name, len(got.Value), got.Found, got.Version, err, len(v), e.Version)
		}
		keys, want = append(keys, k), append(want, v)
	}
	keys = append(keys, key(t, ns, "absent"))
	many, err := s.LookupMany(ctx, ns, keys)
	if err != nil || len(many) != len(keys) {
		t.Fatalf("LookupMany = %d entries, %v; want %d", len(many), err, len(keys))
	}
	for i, v := range want {
		if !many[i].Found || !bytes.Equal(many[i].Value, v) {
			t.Fatalf("LookupMany[%s] = %d bytes (found %v), want the %d written", keys[i].Text, len(many[i].Value), many[i].Found, len(v))
		}
	}
	if many[len(want)].Found {
		t.Fatalf("LookupMany found the absent key")
	}

	k := key(t, ns, "every-byte")
	cur, err := s.Lookup(ctx, ns, k)
	if err != nil {
		t.Fatal(err)
	}
	next := append([]byte{0xfe}, values["every-byte"]...)
	e, err := s.Put(ctx, ns, k, next, &cur.Version)
	if err != nil || !bytes.Equal(e.Value, next) {
		t.Fatalf("Put with If-Match = %d bytes, %v; want the %d written", len(e.Value), err, len(next))
	}
	if got, err := s.Lookup(ctx, ns, k); err != nil || !bytes.Equal(got.Value, next) {
		t.Fatalf("Lookup after Put with If-Match = %d bytes, %v; want %d", len(got.Value), err, len(next))
	}

	if _, err := s.Load(ctx, ns, loadRows(ns, 1, 2, "x")); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Load into a bytes namespace = %v, want ErrInvalidValue", err)
	}
	if _, err := s.Query(ctx, ns, []byte(`{"a": 1}`), 10, nil); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Query of a bytes namespace = %v, want ErrInvalidValue", err)
	}
}

// TestBytesStorage round-trips every byte value through a bytes namespace
// in the storage options the lane does not cover: TOAST lz4 on PostgreSQL
// (a heap on Greenplum, which notes it), append-optimized row zlib and
// append-optimized column rle_type, on both dialects.
func TestBytesStorage(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := []migrations.Table{
				bytesTable("heap_lz4_bytes", migrations.Storage{Compression: "lz4"}),
				bytesTable("ao_row_zlib_bytes", migrations.Storage{AppendOptimized: true, Orientation: "row", Compression: "zlib", CompressLevel: 1}),
				bytesTable("ao_column_rle_bytes", migrations.Storage{AppendOptimized: true, Orientation: "column", Compression: "rle_type"}),
			}
			dsn := migrated(t, w, tables)
			namespaces := namespacesOf(tables)
			s := laneStore(t, dsn, namespaces...)
			for _, ns := range namespaces {
				t.Run(ns.Name, func(t *testing.T) { checkBytes(t, s, ns, blockBound(w, ns)) })
			}
			// The doctor explains the bytea lookups and writes, and the
			// dictionary trainer samples the bytes as stored.
			if _, err := doctor.Diagnose(testContext(t), s); err != nil {
				t.Errorf("Doctor: %v", err)
			}
			sample, err := s.SampleValues(testContext(t), namespaces[0], 100)
			if err != nil || len(sample) == 0 {
				t.Fatalf("SampleValues = %d values, %v", len(sample), err)
			}
			stored := bytesValues()
			for _, v := range sample {
				found := false
				for _, w := range stored {
					found = found || bytes.Equal(v, w) || (len(v) == 257 && bytes.Equal(v[1:], stored["every-byte"]))
				}
				if !found {
					t.Errorf("SampleValues returned %d bytes that were never written", len(v))
				}
			}
		})
	}
}

// bytesSchema creates the table of a bytes namespace by hand.
const bytesSchema = `
CREATE SEQUENCE warmcache_version_seq CACHE 1;
CREATE TABLE blobs (key text PRIMARY KEY, blob bytea NOT NULL, version bigint NOT NULL, expires_at timestamptz NULL);
`

// TestBytesTargets round-trips every byte value with each exec mode and
// through PgBouncer: the simple protocol sends bytea as a quoted literal,
// the others as a binary parameter.
func TestBytesTargets(t *testing.T) {
	ns := bytesTable("blobs", migrations.Storage{}).Namespace
	eachTarget(t, func(t *testing.T, tg target) {
		dsn := newDatabase(t, bytesSchema)
		s := mustOpenStore(t, dsn, tg, ns)
		checkBytes(t, s, ns, false)
	})
}

// blockBound reports whether ns's rows must fit one block: on Greenplum,
// in the lane's append-optimized row tables.
func blockBound(w testenv.Warehouse, ns *warmcache.Namespace) bool {
	return w.Name == "greenplum" && strings.HasPrefix(ns.Name, "ao_row")
}

// TestBytesRefusesAJSONColumn opens a bytes namespace on a jsonb column:
// the store refuses it by the column's type.
func TestBytesRefusesAJSONColumn(t *testing.T) {
	ns := &warmcache.Namespace{Name: "ns", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutBytes, ValueColumn: "value", VersionColumn: "version"}
	dsn := newDatabase(t, schema)
	if _, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: 2}, prometheus.NewRegistry(), ns); err == nil {
		t.Fatal("Open of a bytes namespace on a jsonb column succeeded")
	}
}
