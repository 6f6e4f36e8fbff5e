package zdict_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/warmcache/warmcache/internal/zdict"
)

// widgetDoc returns the local stack's sample widget document with id, as
// the warehouse returns it (jsonb's text form).
func widgetDoc(id int) []byte {
	return fmt.Appendf(nil, `{"widget": {"id": "%d", "text": {"data": "Click Here", "name": "text1", "size": 36, `+
		`"style": "bold", "hOffset": 250, "vOffset": 100, "alignment": "center", `+
		`"onMouseUp": "sun1.opacity = (sun1.opacity / 100) * 90;"}, "debug": "on", `+
		`"image": {"src": "Images/Sun.png", "name": "sun1", "hOffset": 250, "vOffset": 250, "alignment": "center"}, `+
		`"window": {"name": "main_window", "title": "Sample Konfabulator Widget", "width": 500, "height": 500}}}`, id)
}

// widgetDocs returns n widget documents with random ids from a source
// seeded with seed.
func widgetDocs(n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([][]byte, n)
	for i := range out {
		out[i] = widgetDoc(1 + r.IntN(1_000_000))
	}
	return out
}

func TestTrain(t *testing.T) {
	samples := widgetDocs(300, 1)
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
			d, err := zdict.Train(widgetDocs(n, 1), nil, zdict.Options{})
			if n == 1 && err != nil {
				return
			}
			if err != nil {
				t.Fatalf("Train: %v", err)
			}
			sizes, err := zdict.Measure(d, widgetDocs(50, 2))
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
