package zdict_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/warmcache/warmcache/internal/zdict"
)

// orderDocs returns n order documents, as a warehouse returns a table's
// JSON values: one schema, with ids, quantities and statuses drawn from a
// source seeded with seed.
func orderDocs(n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed))
	statuses := []string{"placed", "paid", "shipped", "delivered", "returned"}
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"order": {"id": %d, "status": "%s", "currency": "EUR", `+
			`"customer": {"id": %d, "tier": "gold", "country": "DE", "newsletter": false}, `+
			`"items": [{"sku": "WIDGET-%03d", "qty": %d, "unit_price": "19.90"}, {"sku": "GADGET-%03d", "qty": %d, "unit_price": "4.50"}], `+
			`"shipping": {"method": "standard", "carrier": "DHL", "address": {"city": "Berlin", "postcode": "10115"}}}}`,
			1+r.IntN(1_000_000), statuses[r.IntN(len(statuses))], 1+r.IntN(50_000),
			r.IntN(1000), 1+r.IntN(5), r.IntN(1000), 1+r.IntN(5))
	}
	return out
}

func TestTrain(t *testing.T) {
	samples := orderDocs(300, 1)
	a1, err := zdict.Train(samples, nil, zdict.Options{})
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	a2, err := zdict.Train(samples, nil, zdict.Options{})
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	idA1, err := zdict.ID(a1)
	if err != nil {
		t.Fatalf("ID: %v", err)
	}
	if idA2, _ := zdict.ID(a2); idA1 != idA2 || !bytes.Equal(a1, a2) {
		t.Errorf("training twice on the same samples gave ids %d and %d", idA1, idA2)
	}
	if idA1 < 32768 || idA1 >= 1<<31 {
		t.Errorf("id %d is outside the private range [32768, 2^31)", idA1)
	}
	small, err := zdict.Train(samples, nil, zdict.Options{Size: 4 << 10})
	if err != nil {
		t.Fatalf("Train(4 KiB): %v", err)
	}
	if len(small) > 4<<10 {
		t.Errorf("4 KiB dictionary is %d bytes", len(small))
	}

	// A table of a few rows still gives a dictionary: the content is
	// some of them, the entropy tables come from the rest. One sample
	// may or may not be enough, but never panics.
	for _, n := range []int{1, 3, 30} {
		t.Run(fmt.Sprintf("%d samples", n), func(t *testing.T) {
			d, err := zdict.Train(orderDocs(n, 1), nil, zdict.Options{})
			if n == 1 && err != nil {
				return
			}
			if err != nil {
				t.Fatalf("Train: %v", err)
			}
			sizes, err := zdict.Measure(d, orderDocs(50, 2))
			if err != nil || sizes.DictRatio() < 5 {
				t.Errorf("dictionary from %d samples compresses %.1fx (%v), want at least 5x", n, sizes.DictRatio(), err)
			}
		})
	}

	errCases := []struct {
		name    string
		samples [][]byte
		opts    zdict.Options
	}{
		{"no samples", nil, zdict.Options{}},
		{"only empty samples", [][]byte{{}, {}}, zdict.Options{}},
		{"too small", samples, zdict.Options{Size: 100}},
		{"too large", samples, zdict.Options{Size: 1 << 20}},
	}
	for _, tt := range errCases {
		t.Run(tt.name, func(t *testing.T) {
			if d, err := zdict.Train(tt.samples, nil, tt.opts); err == nil {
				t.Errorf("Train = %d bytes, want an error", len(d))
			}
		})
	}
	if _, err := zdict.ID([]byte("definitely not")); err == nil {
		t.Error("ID(garbage) = nil error")
	}
}
