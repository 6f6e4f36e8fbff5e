package schema_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/testenv"
)

// mustConnect opens a connection to dsn that is closed when the test ends.
func mustConnect(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// testNamespaces returns a packed lz4 namespace with 4 partitions and a GIN
// index, a columns-layout namespace in the schema app, and an unmanaged one.
func testNamespaces() []schema.Table {
	external := packed("external", schema.Storage{})
	external.Managed = false
	return []schema.Table{
		packed("widgets", schema.Storage{Partitions: 4, Compression: "lz4", GINIndex: true}),
		people(schema.Storage{Partitions: 2, Compression: "pglz"}),
		external,
	}
}

// labels returns the steps' labels.
func labels(steps []schema.Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Label())
	}
	return out
}

// queryInt runs a query that returns one integer.
func queryInt(t *testing.T, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// exists says whether a relation exists.
func exists(t *testing.T, conn *pgx.Conn, name string) bool {
	t.Helper()
	return queryInt(t, conn, "SELECT count(*) FROM (SELECT to_regclass($1) AS r) x WHERE r IS NOT NULL", name) == 1
}

func TestMigratorPostgres(t *testing.T) {
	ctx := context.Background()
	conn := mustConnect(t, testenv.NewDatabase(t))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	m, err := schema.OpenMigrator(ctx, conn, testNamespaces(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("OpenMigrator: %v", err)
	}
	if m.Dialect() != dialect.Postgres {
		t.Fatalf("Dialect = %v, want postgres", m.Dialect())
	}

	status, err := m.Status(ctx)
	if err != nil {
		t.Fatalf("Status before Up: %v", err)
	}
	if len(status) != 9 || slices.ContainsFunc(status, func(s schema.StepStatus) bool { return s.Applied }) {
		t.Fatalf("Status before Up = %+v, want 9 pending steps", status)
	}

	applied, err := m.Up(ctx)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	want := []string{"0001 version_sequence", "0002 namespace_table (widgets)", "0002 namespace_table (people)", "0003 dictionaries",
		"0004 freshness", "0005 namespace_freshness (widgets)", "0005 namespace_freshness (people)",
		"0006 namespace_expiry (widgets)", "0006 namespace_expiry (people)"}
	if got := labels(applied); !slices.Equal(got, want) {
		t.Fatalf("Up applied %q, want %q (the unmanaged namespace gets no step)", got, want)
	}

	if !exists(t, conn, "warmcache_version_seq") {
		t.Error("sequence warmcache_version_seq missing after Up")
	}
	if !exists(t, conn, "warmcache_dictionaries") {
		t.Error("table warmcache_dictionaries missing after Up")
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'widgets'::regclass"); n != 4 {
		t.Errorf("widgets has %d partitions, want 4", n)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'app.people'::regclass"); n != 2 {
		t.Errorf("app.people has %d partitions, want 2", n)
	}
	// The parent and each of its 4 partitions compress the value with lz4.
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_attribute
		WHERE attname = 'value' AND attcompression = 'l'
		  AND (attrelid = 'widgets'::regclass OR attrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'widgets'::regclass))`); n != 5 {
		t.Errorf("%d of widgets and its partitions have lz4 on value, want 5", n)
	}
	// The variable-length typed columns (text and numeric) use pglz.
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_attribute
		WHERE attrelid = 'app.people'::regclass AND attcompression = 'p'`); n != 2 {
		t.Errorf("%d columns of app.people have pglz, want 2 (name, balance)", n)
	}
	for _, idx := range []struct{ table, name, def string }{
		{"widgets", "widgets_pkey", "UNIQUE INDEX widgets_pkey ON ONLY public.widgets USING btree (key)"},
		{"widgets", "widgets_value_gin", "INDEX widgets_value_gin ON ONLY public.widgets USING gin (value jsonb_path_ops)"},
		{"people", "people_pkey", "UNIQUE INDEX people_pkey ON ONLY app.people USING btree (email)"},
	} {
		var def string
		err := conn.QueryRow(ctx, "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND indexname = $2", idx.table, idx.name).Scan(&def)
		if err != nil {
			t.Errorf("index %s: %v", idx.name, err)
		} else if def != "CREATE "+idx.def {
			t.Errorf("index %s = %q, want %q", idx.name, def, "CREATE "+idx.def)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'app' AND table_name = 'people'"); n != 7 {
		t.Errorf("app.people has %d columns, want 7 (6 and the expiry column)", n)
	}

	again, err := m.Up(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Up = %q, %v; want nothing applied", labels(again), err)
	}

	status, err = m.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if len(status) != 9 {
		t.Fatalf("Status has %d steps, want 9", len(status))
	}
	for _, s := range status {
		if !s.Applied || s.AppliedAt.IsZero() || time.Since(s.AppliedAt) > time.Hour {
			t.Errorf("Status %s = applied %v at %v, want applied just now", s.Label(), s.Applied, s.AppliedAt)
		}
	}

	// Writers that bypass the service: a version default, a trigger that
	// gives an UPDATE without a version a new one, the delete log.
	if _, err := conn.Exec(ctx, `INSERT INTO widgets (key, value) VALUES (1, '{}')`); err != nil {
		t.Fatalf("insert without a version: %v", err)
	}
	v1 := queryInt(t, conn, "SELECT version FROM widgets WHERE key = 1")
	if _, err := conn.Exec(ctx, `UPDATE widgets SET value = '{"a":1}' WHERE key = 1`); err != nil {
		t.Fatalf("update without a version: %v", err)
	}
	if v2 := queryInt(t, conn, "SELECT version FROM widgets WHERE key = 1"); v2 <= v1 {
		t.Errorf("an UPDATE without a version left it at %d (was %d), want a new one", v2, v1)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM widgets WHERE key = 1`); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM warmcache_deletes WHERE namespace = 'widgets' AND key = '1'"); n != 1 {
		t.Errorf("the delete log has %d rows for the deleted key, want 1", n)
	}

	reverted, err := m.Down(ctx)
	if err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got, want := labels(reverted), []string{"0006 namespace_expiry (people)", "0006 namespace_expiry (widgets)"}; !slices.Equal(got, want) {
		t.Fatalf("Down reverted %q, want %q", got, want)
	}
	reverted, err = m.Down(ctx)
	if err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got, want := labels(reverted), []string{"0005 namespace_freshness (people)", "0005 namespace_freshness (widgets)"}; !slices.Equal(got, want) {
		t.Fatalf("Down reverted %q, want %q", got, want)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%_warmcache_%'"); n != 0 {
		t.Errorf("%d triggers remain after reverting version 5", n)
	}
	reverted, err = m.Down(ctx)
	if err != nil || !slices.Equal(labels(reverted), []string{"0004 freshness"}) {
		t.Fatalf("Down = %q, %v; want 0004 freshness", labels(reverted), err)
	}
	if exists(t, conn, "warmcache_deletes") || exists(t, conn, "warmcache_generations") {
		t.Error("freshness tables remain after reverting version 4")
	}

	reverted, err = m.Down(ctx)
	if err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got, want := labels(reverted), []string{"0003 dictionaries"}; !slices.Equal(got, want) {
		t.Fatalf("Down reverted %q, want %q", got, want)
	}
	if exists(t, conn, "warmcache_dictionaries") || !exists(t, conn, "widgets") {
		t.Error("after reverting version 3: want warmcache_dictionaries gone and widgets kept")
	}

	reverted, err = m.Down(ctx)
	if err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got, want := labels(reverted), []string{"0002 namespace_table (people)", "0002 namespace_table (widgets)"}; !slices.Equal(got, want) {
		t.Fatalf("Down reverted %q, want %q", got, want)
	}
	if exists(t, conn, "widgets") || exists(t, conn, "app.people") || exists(t, conn, "widgets_p0") {
		t.Error("namespace tables remain after reverting version 2")
	}
	if !exists(t, conn, "warmcache_version_seq") {
		t.Error("sequence dropped when reverting version 2")
	}

	reverted, err = m.Down(ctx)
	if err != nil {
		t.Fatalf("second Down: %v", err)
	}
	if got, want := labels(reverted), []string{"0001 version_sequence"}; !slices.Equal(got, want) {
		t.Fatalf("second Down reverted %q, want %q", got, want)
	}
	if exists(t, conn, "warmcache_version_seq") {
		t.Error("sequence remains after reverting version 1")
	}

	status, err = m.Status(ctx)
	if err != nil {
		t.Fatalf("Status after Down: %v", err)
	}
	for _, s := range status {
		if s.Applied || !s.AppliedAt.IsZero() {
			t.Errorf("Status %s = applied %v at %v after Down, want pending", s.Label(), s.Applied, s.AppliedAt)
		}
	}
	if reverted, err := m.Down(ctx); err != nil || len(reverted) != 0 {
		t.Errorf("Down with nothing applied = %q, %v; want nothing", labels(reverted), err)
	}
}

func TestMigratorConcurrentUp(t *testing.T) {
	dsn := testenv.NewDatabase(t)
	ns := []schema.Table{packed("widgets", schema.Storage{Partitions: 2})}
	const n = 3
	results := make(chan []schema.Step, n)
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		m, err := schema.NewMigrator(mustConnect(t, dsn), dialect.Postgres, ns, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			<-start
			applied, err := m.Up(context.Background())
			results <- applied
			errs <- err
		}()
	}
	close(start)
	var total []string
	for range n {
		total = append(total, labels(<-results)...)
		if err := <-errs; err != nil {
			t.Errorf("Up: %v", err)
		}
	}
	slices.Sort(total)
	if want := []string{"0001 version_sequence", "0002 namespace_table (widgets)", "0003 dictionaries", "0004 freshness", "0005 namespace_freshness (widgets)", "0006 namespace_expiry (widgets)"}; !slices.Equal(total, want) {
		t.Errorf("migrators applied %q together, want each step once: %q", total, want)
	}
}

func TestMigratorDownRefusesUnknownScope(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	conn := mustConnect(t, dsn)
	full, err := schema.NewMigrator(conn, dialect.Postgres, []schema.Table{packed("widgets", schema.Storage{}), packed("gadgets", schema.Storage{})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	partial, err := schema.NewMigrator(conn, dialect.Postgres, []schema.Table{packed("widgets", schema.Storage{})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, err := partial.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	last := status[len(status)-1]
	if len(status) != 9 || last.Scope != "gadgets" || !last.Applied || last.Up != "" {
		t.Errorf("Status = %+v, want the unplanned gadgets steps listed last as applied", status)
	}
	if reverted, err := partial.Down(ctx); err == nil || len(reverted) != 0 {
		t.Fatalf("Down = %q, %v; want an error and nothing reverted", labels(reverted), err)
	}
	if !exists(t, conn, "widgets") || !exists(t, conn, "gadgets") {
		t.Error("a table was dropped by a refused Down")
	}
}

func TestMigratorThroughPgBouncer(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	cfg, err := pgx.ParseConfig(testenv.PgBouncerDSN(t, testenv.DatabaseName(t, dsn)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect through PgBouncer: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	m, err := schema.OpenMigrator(ctx, conn, []schema.Table{packed("widgets", schema.Storage{GINIndex: true})}, nil)
	if err != nil {
		t.Fatalf("OpenMigrator: %v", err)
	}
	if applied, err := m.Up(ctx); err != nil || len(applied) != 6 {
		t.Fatalf("Up = %q, %v; want 6 steps", labels(applied), err)
	}
	for _, want := range []string{"0006 namespace_expiry (widgets)", "0005 namespace_freshness (widgets)", "0004 freshness", "0003 dictionaries", "0002 namespace_table (widgets)"} {
		if reverted, err := m.Down(ctx); err != nil || !slices.Equal(labels(reverted), []string{want}) {
			t.Fatalf("Down = %q, %v; want %q", labels(reverted), err, want)
		}
	}
	direct := mustConnect(t, dsn)
	if exists(t, direct, "widgets") || !exists(t, direct, "warmcache_version_seq") {
		t.Error("after Down through PgBouncer: want widgets gone and the sequence kept")
	}
}
