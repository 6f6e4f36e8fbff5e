package pgstore_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestLookupFunction checks the lookup function's life: Open creates it
// and LookupMany reads through it (directly and through PgBouncer); with
// the setting off, or use, none is created; a function of that name with
// another body, or one the role may not execute, is not used; a role that
// may not create it still opens and reads with the plain statement, with a
// warning; and a function dropped while the store runs costs no read.
func TestLookupFunction(t *testing.T) {
	widgets := widgetsNamespace()
	stmts, err := pgstore.Statements(widgets, false)
	if err != nil {
		t.Fatal(err)
	}
	signature := stmts.LookupSignature()
	if signature == "" || stmts.LookupCall == "" {
		t.Fatalf("the widgets statements have no lookup function: %+v", stmts)
	}
	// impostor replaces the function with one that answers every key with
	// a marker, which tells whether reads go through it.
	impostor := "CREATE OR REPLACE FUNCTION " + signature + ` RETURNS TABLE (warmcache_position bigint, warmcache_value text, warmcache_version bigint)
LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN QUERY SELECT k.i, '{"marker": true}'::text, 1::bigint FROM unnest($1) WITH ORDINALITY AS k(key, i); END $$`
	marked := func(t *testing.T, s *pgstore.Store) bool {
		t.Helper()
		entries, err := s.LookupMany(testContext(t), widgets, []warmcache.Key{key(t, widgets, "1"), key(t, widgets, "99")})
		if err != nil {
			t.Fatalf("LookupMany: %v", err)
		}
		return string(entries[1].Value) == `{"marker": true}`
	}

	for _, tg := range []target{targets()[1], targets()[4]} {
		t.Run("created/"+tg.name, func(t *testing.T) {
			dsn := newDatabase(t, schema+seed)
			log := &testproc.SyncBuffer{}
			s := openLogged(t, options(t, dsn, tg), log, widgets)
			if !functionExists(t, dsn, signature) {
				t.Fatalf("Open did not create %s", signature)
			}
			checkWidgets(t, s, widgets)
			execSQL(t, dsn, impostor)
			if !marked(t, s) {
				t.Fatal("LookupMany did not read through the lookup function")
			}
			// Dropped behind the store's back: reads go on, with a warning.
			execSQL(t, dsn, "DROP FUNCTION "+signature)
			checkWidgets(t, s, widgets)
			checkWidgets(t, s, widgets)
			if got := log.String(); strings.Count(got, "the lookup function is gone") != 1 {
				t.Errorf("log after the function was dropped = %q, want one warning", got)
			}
			// The next Open creates it again.
			openLogged(t, options(t, dsn, tg), log, widgets)
			if !functionExists(t, dsn, signature) {
				t.Fatalf("a second Open did not create %s again", signature)
			}
		})
	}

	t.Run("another definition", func(t *testing.T) {
		dsn := newDatabase(t, schema+seed)
		execSQL(t, dsn, impostor)
		log := &testproc.SyncBuffer{}
		s := openLogged(t, options(t, dsn, targets()[1]), log, widgets)
		if marked(t, s) {
			t.Fatal("the store read through a function of another definition")
		}
		checkWidgets(t, s, widgets)
		if got := log.String(); !strings.Contains(got, "exists with another definition") {
			t.Errorf("log = %q, want a warning about the other definition", got)
		}
	})

	for _, setting := range []pgstore.FunctionMode{pgstore.FunctionOff, pgstore.FunctionUse} {
		t.Run(string(setting), func(t *testing.T) {
			dsn := newDatabase(t, schema+seed)
			opts := options(t, dsn, targets()[1])
			opts.LookupFunction = setting
			s := openLogged(t, opts, &testproc.SyncBuffer{}, widgets)
			if functionExists(t, dsn, signature) {
				t.Fatalf("Open with the lookup function %s created %s", setting, signature)
			}
			checkWidgets(t, s, widgets)
		})
	}

	t.Run("reader role", func(t *testing.T) {
		dsn := newDatabase(t, schema+seed)
		role := "wc_reader_" + testenv.RandomSuffix(t)
		execSQL(t, dsn, "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() { execSQL(t, dsn, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
		execSQL(t, dsn, "REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+role)
		readOnly := *widgets
		readOnly.Writable = false
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		asReader := pgstore.Options{DSN: u.String(), MaxConns: 2}

		// It may not create the function.
		log := &testproc.SyncBuffer{}
		s := openLogged(t, asReader, log, &readOnly)
		if functionExists(t, dsn, signature) {
			t.Fatalf("%s exists, created by a role without CREATE", signature)
		}
		if got := log.String(); !strings.Contains(got, "the lookup function cannot serve") || !strings.Contains(got, "permission denied") {
			t.Errorf("log = %q, want a warning that names the permission", got)
		}
		checkWidgets(t, s, &readOnly)

		// Nor execute the one another role created for itself.
		openLogged(t, options(t, dsn, targets()[1]), &testproc.SyncBuffer{}, widgets)
		execSQL(t, dsn, "REVOKE EXECUTE ON FUNCTION "+signature+" FROM PUBLIC")
		log = &testproc.SyncBuffer{}
		s = openLogged(t, asReader, log, &readOnly)
		if got := log.String(); !strings.Contains(got, "may not execute it") {
			t.Errorf("log = %q, want a warning that the role may not execute the function", got)
		}
		checkWidgets(t, s, &readOnly)
	})
}

// checkWidgets reads seeded widgets, absent keys among them, in one batch
// and alone, and checks each answer.
func checkWidgets(t *testing.T, s *pgstore.Store, ns *warmcache.Namespace) {
	t.Helper()
	raw := []string{"3", "99", "1", "-7"}
	want := []string{`{"name": "three", "tags": ["a", "b"]}`, "", `{"name": "one"}`, `{"name": "minus seven"}`}
	keys := make([]warmcache.Key, len(raw))
	for i, r := range raw {
		keys[i] = key(t, ns, r)
	}
	for _, batch := range [][]int{{0, 1, 2, 3}, {2}, {1}} {
		ks := make([]warmcache.Key, len(batch))
		for j, i := range batch {
			ks[j] = keys[i]
		}
		entries, err := s.LookupMany(testContext(t), ns, ks)
		if err != nil {
			t.Fatalf("LookupMany(%v): %v", batch, err)
		}
		for j, i := range batch {
			if e := entries[j]; e.Found != (want[i] != "") || string(e.Value) != want[i] {
				t.Errorf("key %s = found %v, value %s; want %q", raw[i], e.Found, e.Value, want[i])
			}
		}
	}
}

// functionExists reports whether the function of signature exists in the
// database of dsn.
func functionExists(t *testing.T, dsn, signature string) bool {
	t.Helper()
	var oid *uint32
	withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
		if err := conn.QueryRow(ctx, "SELECT to_regprocedure($1)::oid", signature).Scan(&oid); err != nil {
			t.Fatalf("to_regprocedure: %v", err)
		}
	})
	return oid != nil
}

// openLogged opens a store that logs to log, and closes it when the test
// ends.
func openLogged(t *testing.T, opts pgstore.Options, log *testproc.SyncBuffer, namespaces ...*warmcache.Namespace) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, opts, namespaces, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
