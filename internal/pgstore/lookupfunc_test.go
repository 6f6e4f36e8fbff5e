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
// and LookupMany answers through it (directly and through PgBouncer);
// with the setting off it is not created; a role that may not create it
// still opens and reads with the plain statement, with a warning; and a
// function dropped while the store runs costs no read.
func TestLookupFunction(t *testing.T) {
	widgets := widgetsNamespace()
	stmts, err := pgstore.Statements(widgets, false)
	if err != nil {
		t.Fatal(err)
	}
	signature := pgstore.LookupSignature(stmts)
	if signature == "" || stmts.LookupCall == "" {
		t.Fatalf("the widgets statements have no lookup function: %+v", stmts)
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

	t.Run("off", func(t *testing.T) {
		dsn := newDatabase(t, schema+seed)
		opts := options(t, dsn, targets()[1])
		opts.LookupFunction = pgstore.LookupFunctionOff
		s := openLogged(t, opts, &testproc.SyncBuffer{}, widgets)
		if functionExists(t, dsn, signature) {
			t.Fatalf("Open with the lookup function off created %s", signature)
		}
		checkWidgets(t, s, widgets)
	})

	t.Run("no CREATE privilege", func(t *testing.T) {
		dsn := newDatabase(t, schema+seed)
		role := "wc_reader_" + testenv.RandomSuffix(t)
		execSQL(t, dsn, "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(c, dsn)
			if err != nil {
				t.Errorf("connect to drop role: %v", err)
				return
			}
			defer conn.Close(c)
			if _, err := conn.Exec(c, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
				t.Errorf("drop role: %v", err)
			}
		})
		execSQL(t, dsn, "REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+role)
		readOnly := *widgets
		readOnly.Writable = false
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		log := &testproc.SyncBuffer{}
		s := openLogged(t, pgstore.Options{DSN: u.String(), MaxConns: 2}, log, &readOnly)
		if functionExists(t, dsn, signature) {
			t.Fatalf("%s exists, created by a role without CREATE", signature)
		}
		if got := log.String(); !strings.Contains(got, "the lookup function could not be created") || !strings.Contains(got, "permission denied") {
			t.Errorf("log = %q, want a warning that names the permission", got)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT to_regprocedure($1)::oid", signature).Scan(&oid); err != nil {
		t.Fatalf("to_regprocedure: %v", err)
	}
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
