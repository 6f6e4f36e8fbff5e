package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// querySeed fills widgets with 2,000 rows in five colours, each with a
// unique serial, and adds the GIN index that serves containment queries.
const querySeed = `
CREATE INDEX widgets_value_gin ON widgets USING gin (value jsonb_path_ops);
INSERT INTO widgets (key, value, version)
SELECT g, jsonb_build_object('widget', jsonb_build_object(
	'color', (ARRAY['red','green','blue','black','white'])[g % 5 + 1],
	'serial', 's' || g, 'debug', 'on')), nextval('warmcache_version_seq')
FROM generate_series(1, 2000) g;
`

func TestQueryPages(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		widgets := widgetsNamespace()
		s := mustOpenStore(t, newDatabase(t, schema+querySeed), tg, widgets)
		ctx := testContext(t)
		var all []warmcache.QueryRow
		var after *warmcache.Key
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatal("more pages than rows")
			}
			rows, err := s.Query(ctx, widgets, []byte(`{"widget":{"color":"red"}}`), 150, after)
			if err != nil {
				t.Fatalf("Query page %d: %v", page, err)
			}
			all = append(all, rows...)
			if len(rows) < 150 {
				break
			}
			after = &rows[len(rows)-1].Key
		}
		if len(all) != 400 {
			t.Fatalf("got %d red widgets, want 400", len(all))
		}
		for i, r := range all {
			if i > 0 && r.Key.Int <= all[i-1].Key.Int {
				t.Fatalf("row %d key %d does not follow key %d", i, r.Key.Int, all[i-1].Key.Int)
			}
			var v struct{ Widget struct{ Color string } }
			if err := json.Unmarshal(r.Entry.Value, &v); err != nil || v.Widget.Color != "red" || r.Entry.Version <= 0 {
				t.Fatalf("row %d = %s version %d, err %v", i, r.Entry.Value, r.Entry.Version, err)
			}
		}
	})
}

func TestQueryCases(t *testing.T) {
	widgets, sessions, people := widgetsNamespace(), sessionsNamespace(), peopleNamespace()
	s := mustOpenStore(t, newDatabase(t, schema+querySeed+`
INSERT INTO app.sessions (id, doc, version) VALUES ('a', '{"user": 1}', 1), ('b', '{"user": 2}', 2), ('c', '{"user": 1}', 3);
INSERT INTO people (id, name, age, tags, version) VALUES (1, 'Ann', 41, '["x"]', 1), (2, 'Bo', 41, NULL, 2), (3, 'Cy', 9, NULL, 3);
`), target{wantMode: "cache_statement"}, widgets, sessions, people)
	textKey := func(k string) *warmcache.Key { return &warmcache.Key{Text: k} }
	tests := []struct {
		name  string
		ns    *warmcache.Namespace
		match string
		limit int
		after *warmcache.Key
		keys  string
	}{
		{"unique serial", widgets, `{"widget":{"serial":"s42"}}`, 10, nil, "42"},
		{"no match", widgets, `{"widget":{"color":"purple"}}`, 10, nil, ""},
		{"limit", widgets, `{"widget":{"color":"green"}}`, 3, nil, "1,6,11"},
		{"after", widgets, `{"widget":{"color":"green"}}`, 2, &warmcache.Key{Text: "11", Int: 11}, "16,21"},
		{"text keys", sessions, `{"user":1}`, 10, nil, "a,c"},
		{"text keys after", sessions, `{"user":1}`, 10, textKey("a"), "c"},
		{"columns layout", people, `{"age":41}`, 10, nil, "1,2"},
		{"columns layout nested", people, `{"tags":["x"]}`, 10, nil, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := s.Query(testContext(t), tt.ns, []byte(tt.match), tt.limit, tt.after)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			var keys []string
			for _, r := range rows {
				keys = append(keys, r.Key.Text)
			}
			if got := strings.Join(keys, ","); got != tt.keys {
				t.Fatalf("Query keys = %q, want %q", got, tt.keys)
			}
		})
	}
}

// TestQueryUsesGINIndex shows with EXPLAIN that a containment query is
// answered through the GIN index, in every hash partition it reads.
func TestQueryUsesGINIndex(t *testing.T) {
	// Enough rows that each partition spans more than a few pages, where
	// a sequential scan is the cheaper plan.
	dsn := newDatabase(t, schema+strings.Replace(querySeed, "2000", "20000", 1))
	// Rows inserted after the index was created wait in the GIN index's
	// pending list, which the planner prices as a full read until VACUUM
	// (or autovacuum) merges it.
	execSQL(t, dsn, "VACUUM ANALYZE widgets")
	stmts, err := pgstore.BuildQueryStatements(widgetsNamespace())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var plan string
	err = conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+stmts.First, `{"widget":{"serial":"s42"}}`, 100).Scan(&plan)
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", plan, err)
	}
	var gin, seq int
	doc[0].Plan.walk(func(n planNode) {
		switch n.NodeType {
		case "Bitmap Index Scan":
			if strings.HasPrefix(n.IndexName, "widgets_p") && strings.Contains(n.IndexCond, "@>") {
				gin++
			}
		case "Seq Scan":
			seq++
		}
	})
	if gin != 4 || seq != 0 {
		t.Fatalf("plan has %d GIN index scans and %d sequential scans, want 4 and 0:\n%s", gin, seq, plan)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// TestQueryStatementTimeout shows that the query runs with a statement
// timeout taken from the context's deadline, set inside its transaction
// (also through PgBouncer), and that a query that runs out of it fails
// with context.DeadlineExceeded.
func TestQueryStatementTimeout(t *testing.T) {
	eachTarget(t, func(t *testing.T, tg target) {
		dsn := newDatabase(t, schema+`
CREATE VIEW settings AS SELECT 1::bigint AS key, jsonb_build_object('timeout', current_setting('statement_timeout')) AS value, 1::bigint AS version;
CREATE VIEW slow AS SELECT 1::bigint AS key, '{}'::jsonb AS value, 1::bigint AS version FROM pg_sleep(5);
`)
		settings := &warmcache.Namespace{Name: "settings", Table: "settings", KeyColumn: "key", KeyType: warmcache.KeyBigint,
			Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
		slow := *settings
		slow.Name, slow.Table = "slow", "slow"
		s := mustOpenStore(t, dsn, tg, settings, &slow)

		ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
		defer cancel()
		rows, err := s.Query(ctx, settings, []byte(`{}`), 10, nil)
		if err != nil || len(rows) != 1 {
			t.Fatalf("Query = %v, %v", rows, err)
		}
		var v struct{ Timeout string }
		if err := json.Unmarshal(rows[0].Entry.Value, &v); err != nil {
			t.Fatal(err)
		}
		var ms int
		if _, err := fmt.Sscanf(v.Timeout, "%dms", &ms); err != nil || ms < 15_000 || ms > 20_000 {
			if v.Timeout != "20s" {
				t.Fatalf("statement_timeout inside the query = %q, want about 20s", v.Timeout)
			}
		}

		ctx, cancel = context.WithTimeout(testContext(t), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = s.Query(ctx, &slow, []byte(`{}`), 10, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow Query error = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("slow Query took %v, want about 200ms", d)
		}

		// The session's own timeout is untouched afterwards.
		rows, err = s.Query(testContext(t), settings, []byte(`{}`), 10, nil)
		if err != nil || len(rows) != 1 {
			t.Fatalf("Query after a timeout = %v, %v", rows, err)
		}
	})
}
