package advise_test

import (
	"fmt"
	"testing"

	"github.com/warmcache/warmcache/internal/advise"
)

// TestTrainDictionary checks the bytea candidate's compression: a
// dictionary from zdict on values that share a schema, and plain zstd on a
// sample too uniform to train one, so that advise measures the candidate
// either way.
func TestTrainDictionary(t *testing.T) {
	varied := make([][]byte, 300)
	for i := range varied {
		varied[i] = fmt.Appendf(nil, `{"id": %d, "name": "widget %d", "color": "blue", "size": {"w": %d, "h": 40}, "tags": ["a", "b"]}`, i, i*7, i%13)
	}
	uniform := [][]byte{[]byte(`{"a":1}`), []byte(`{"a":1}`)}
	for _, tt := range []struct {
		name     string
		values   [][]byte
		wantDict bool
	}{
		{"varied", varied, true},
		{"uniform", uniform, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			size, ratio, roundTrip, err := advise.TrainDictionary(tt.values)
			if err != nil {
				t.Fatalf("TrainDictionary: %v", err)
			}
			if (size > 0) != tt.wantDict {
				t.Errorf("dictionary of %d bytes; want one: %v", size, tt.wantDict)
			}
			if ratio <= 0 || !roundTrip {
				t.Errorf("ratio %.2f, round trip %v; want a positive ratio and the value back", ratio, roundTrip)
			}
			if tt.wantDict && ratio < 3 {
				t.Errorf("dictionary ratio %.2f on values of one schema, want at least 3", ratio)
			}
		})
	}
}
