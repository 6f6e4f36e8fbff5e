package bench_test

import (
	"testing"

	"github.com/warmcache/warmcache/loadtest/bench"
)

func TestPermutationIsABijection(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint64
		seed uint64
	}{
		{"one", 1, 3},
		{"prime", 101, 1},
		{"power of ten", 1000, 7},
		{"power of two", 1024, 9},
		{"even with many factors", 720, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := bench.NewPermutation(tc.n, tc.seed)
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]bool, tc.n)
			for i := range tc.n {
				v := p.At(i)
				if v >= tc.n {
					t.Fatalf("At(%d) = %d, out of [0, %d)", i, v, tc.n)
				}
				if seen[v] {
					t.Fatalf("At(%d) = %d repeats an earlier value", i, v)
				}
				seen[v] = true
			}
			if got := p.At(tc.n + 5); got != p.At(5) {
				t.Errorf("At(n+5) = %d, want At(5) = %d", got, p.At(5))
			}
		})
	}
}

func TestPermutationRejectsEmptyRange(t *testing.T) {
	if _, err := bench.NewPermutation(0, 1); err == nil {
		t.Fatal("NewPermutation(0) succeeded")
	}
}

func TestZipfKeysStayInRangeAndAreSkewed(t *testing.T) {
	const rows = 1_000_000
	keys, err := bench.ZipfKeys(50_000, rows, 1.1, 42)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 50_000 {
		t.Fatalf("got %d keys, want 50000", len(keys))
	}
	counts := map[int64]int{}
	for _, k := range keys {
		if k < 1 || k > rows {
			t.Fatalf("key %d out of [1, %d]", k, rows)
		}
		counts[k]++
	}
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	// With s = 1.1 the most frequent key takes several percent of the draws;
	// a uniform draw would repeat a key a handful of times at most.
	if top < 1000 {
		t.Errorf("most frequent key drawn %d times out of 50000; want a skewed distribution", top)
	}
	if d := len(bench.Distinct(keys)); d != len(counts) || d < 100 {
		t.Errorf("Distinct gave %d keys, counted %d", d, len(counts))
	}

	again, err := bench.ZipfKeys(50_000, rows, 1.1, 42)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if keys[i] != again[i] {
			t.Fatalf("same seed, key %d differs: %d vs %d", i, keys[i], again[i])
		}
	}
}

func TestZipfKeysRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		rows  uint64
		s     float64
	}{
		{"no rows", 10, 0, 1.1},
		{"exponent one", 10, 100, 1},
		{"negative count", -1, 100, 1.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := bench.ZipfKeys(tc.count, tc.rows, tc.s, 1); err == nil {
				t.Fatal("ZipfKeys succeeded")
			}
		})
	}
}

func TestDistinctKeepsFirstAppearanceOrder(t *testing.T) {
	got := bench.Distinct([]int64{5, 3, 5, 1, 3, 9})
	want := []int64{5, 3, 1, 9}
	if len(got) != len(want) {
		t.Fatalf("Distinct = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Distinct = %v, want %v", got, want)
		}
	}
}
