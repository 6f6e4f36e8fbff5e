package pgstore_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	wcschema "github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/zdict"
)

// dictionaryTableSQL returns the DDL of the dictionary table as migrate
// applies it on PostgreSQL.
func dictionaryTableSQL(tb testing.TB) string {
	tb.Helper()
	steps, err := wcschema.Plan(dialect.Postgres, nil)
	if err != nil {
		tb.Fatalf("Plan: %v", err)
	}
	for _, s := range steps {
		if s.Name == "dictionaries" {
			return s.Up
		}
	}
	tb.Fatal("no dictionaries migration in the plan")
	return ""
}

// seedWidgets inserts n widget documents, keys 1..n, in the shape of the
// local stack's sample data.
const seedWidgets = `INSERT INTO widgets (key, value, version)
SELECT g, jsonb_set('{"widget": {"debug": "on", "id": "", "window": {"title": "Sample Konfabulator Widget",
  "name": "main_window", "width": 500, "height": 500}, "image": {"src": "Images/Sun.png", "name": "sun1",
  "hOffset": 250, "vOffset": 250, "alignment": "center"}, "text": {"data": "Click Here", "size": 36,
  "style": "bold", "name": "text1", "hOffset": 250, "vOffset": 100, "alignment": "center",
  "onMouseUp": "sun1.opacity = (sun1.opacity / 100) * 90;"}}}'::jsonb, '{widget,id}', to_jsonb(g::text)), g
FROM generate_series(1::bigint, $1::bigint) AS g`

func TestDictionaries(t *testing.T) {
	dsn := newDatabase(t, schema+dictionaryTableSQL(t))
	execSQL(t, dsn, seedWidgets, 300)
	eachTarget(t, func(t *testing.T, tg target) {
		ctx := testContext(t)
		ns := widgetsNamespace()
		s := mustOpenStore(t, dsn, tg, ns)
		execSQL(t, dsn, "TRUNCATE "+pgstore.DictionaryTable)

		got, err := s.Dictionaries(ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("Dictionaries on an empty table = %v, %v; want none", got, err)
		}

		sample, err := s.SampleValues(ctx, ns, 100)
		if err != nil {
			t.Fatalf("SampleValues: %v", err)
		}
		ids := map[string]bool{}
		for _, v := range sample {
			var doc struct {
				Widget struct {
					ID string `json:"id"`
				} `json:"widget"`
			}
			if err := json.Unmarshal(v, &doc); err != nil || doc.Widget.ID == "" {
				t.Fatalf("sampled value %q is not a widget document: %v", v, err)
			}
			ids[doc.Widget.ID] = true
		}
		if len(sample) != 100 || len(ids) != 100 {
			t.Errorf("SampleValues(100) = %d values of %d distinct widgets, want 100 distinct", len(sample), len(ids))
		}
		if all, err := s.SampleValues(ctx, ns, 1000); err != nil || len(all) != 300 {
			t.Errorf("SampleValues(1000) on 300 rows = %d values, %v; want 300", len(all), err)
		}
		// The sample is the bytes a lookup returns, so a dictionary
		// trained on it fits the cached values.
		e, err := s.Lookup(ctx, ns, key(t, ns, "7"))
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		if all, _ := s.SampleValues(ctx, ns, 1000); !slices.ContainsFunc(all, func(v []byte) bool { return string(v) == string(e.Value) }) {
			t.Errorf("no sampled value is byte for byte the lookup's %q", e.Value)
		}

		dictA, err := zdict.Train(sample[:50], sample[50:], zdict.Options{})
		if err != nil {
			t.Fatalf("TrainDictionary: %v", err)
		}
		dictB, err := zdict.Train(sample[50:], sample[:50], zdict.Options{})
		if err != nil {
			t.Fatalf("TrainDictionary: %v", err)
		}
		save := func(d []byte) pgstore.Dictionary {
			t.Helper()
			id, err := zdict.ID(d)
			if err != nil {
				t.Fatal(err)
			}
			saved, err := s.SaveDictionary(ctx, pgstore.Dictionary{Namespace: ns.Name, ID: id, Data: d})
			if err != nil {
				t.Fatalf("SaveDictionary: %v", err)
			}
			if saved.ID != id || saved.CreatedAt.IsZero() {
				t.Errorf("SaveDictionary = id %d at %v, want id %d and a time", saved.ID, saved.CreatedAt, id)
			}
			return saved
		}
		a, b := save(dictA), save(dictB)
		if a.ID == b.ID {
			t.Fatalf("two dictionaries share id %d", a.ID)
		}
		other := save(dictA)
		other.Namespace = "gadgets"
		if _, err := s.SaveDictionary(ctx, other); err != nil {
			t.Fatalf("SaveDictionary for another namespace: %v", err)
		}

		order := func() []string {
			t.Helper()
			got, err := s.Dictionaries(ctx)
			if err != nil {
				t.Fatalf("Dictionaries: %v", err)
			}
			var out []string
			for _, d := range got {
				want := dictA
				if d.ID == b.ID {
					want = dictB
				}
				if string(d.Data) != string(want) {
					t.Errorf("dictionary %s/%d reads back %d bytes that differ from the %d stored", d.Namespace, d.ID, len(d.Data), len(want))
				}
				out = append(out, d.Namespace+"/"+name(d.ID, a.ID, b.ID))
			}
			return out
		}
		// A was saved again after B, so it is the newest of widgets.
		if got, want := order(), []string{"gadgets/A", "widgets/B", "widgets/A"}; !slices.Equal(got, want) {
			t.Errorf("Dictionaries = %q, want %q", got, want)
		}
		save(dictB)
		if got, want := order(), []string{"gadgets/A", "widgets/A", "widgets/B"}; !slices.Equal(got, want) {
			t.Errorf("Dictionaries after saving B again = %q, want %q", got, want)
		}
	})
}

// name labels a dictionary id as A or B.
func name(id, a, b uint32) string {
	switch id {
	case a:
		return "A"
	case b:
		return "B"
	default:
		return "?"
	}
}

func TestDictionariesErrors(t *testing.T) {
	dsn := newDatabase(t, schema)
	ctx := testContext(t)
	ns := widgetsNamespace()
	s, err := openStore(t, pgstore.Options{DSN: dsn}, prometheus.NewRegistry(), ns)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := s.Dictionaries(ctx); !errors.Is(err, pgstore.ErrNoDictionaryTable) {
		t.Errorf("Dictionaries without the table: %v, want ErrNoDictionaryTable", err)
	}
	_, err = s.SaveDictionary(ctx, pgstore.Dictionary{Namespace: "widgets", ID: 40000, Data: []byte("d")})
	if !errors.Is(err, pgstore.ErrNoDictionaryTable) {
		t.Errorf("SaveDictionary without the table: %v, want ErrNoDictionaryTable", err)
	}
	if _, err := s.SaveDictionary(ctx, pgstore.Dictionary{Namespace: "widgets"}); err == nil {
		t.Error("SaveDictionary without id and data: nil error")
	}
	if got, err := s.SampleValues(ctx, ns, 10); err != nil || len(got) != 0 {
		t.Errorf("SampleValues on an empty table = %d values, %v; want none", len(got), err)
	}
	unknown := widgetsNamespace()
	unknown.Name = "unknown"
	if _, err := s.SampleValues(ctx, unknown, 10); !errors.Is(err, warmcache.ErrUnknownNamespace) {
		t.Errorf("SampleValues of an unknown namespace: %v, want ErrUnknownNamespace", err)
	}
}
