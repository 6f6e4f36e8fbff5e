// Package bench holds the pure parts of the load-test harness: key
// generators, latency summaries, the parsers of the baseline tools' output,
// the markdown report and its charts. Nothing here talks to a server.
package bench

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Permutation is a bijection of [0, n): an affine map i -> (a*i + b) mod n
// with a coprime to n. It spreads consecutive indexes over the whole key
// space, so that a sequence of distinct indexes yields distinct,
// scattered keys. The zero value is not usable; build one with
// NewPermutation. A Permutation is a value and safe for concurrent use.
type Permutation struct {
	n, a, b uint64
}

// NewPermutation returns a permutation of [0, n) chosen by seed. It
// returns an error when n is zero.
func NewPermutation(n, seed uint64) (Permutation, error) {
	if n == 0 {
		return Permutation{}, fmt.Errorf("bench: permutation of an empty range")
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	a := r.Uint64N(n) | 1
	for gcd(a, n) != 1 {
		a = (a + 2) % n
		if a == 0 {
			a = 1
		}
	}
	return Permutation{n: n, a: a, b: r.Uint64N(n)}, nil
}

// Len is the size of the permuted range.
func (p Permutation) Len() uint64 { return p.n }

// At returns the image of i mod n, in [0, n).
func (p Permutation) At(i uint64) uint64 {
	hi, lo := bits.Mul64(p.a, i%p.n)
	_, rem := bits.Div64(hi, lo, p.n) // hi < n because a < n and i%n < n
	sum, carry := bits.Add64(rem, p.b, 0)
	if carry != 0 || sum >= p.n {
		sum -= p.n
	}
	return sum
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ZipfKeys returns count keys in [1, rows] drawn from a Zipf distribution
// with exponent s (s > 1): rank 0 is the most frequent. Ranks are mapped
// through a permutation so that the hot keys are scattered over the table
// rather than packed at its start. The same seed gives the same keys. It
// returns an error when rows is zero, count is negative or s <= 1.
func ZipfKeys(count int, rows uint64, s float64, seed uint64) ([]int64, error) {
	if rows == 0 || count < 0 || !(s > 1) {
		return nil, fmt.Errorf("bench: zipf keys: want rows > 0, count >= 0, s > 1; got rows %d, count %d, s %g", rows, count, s)
	}
	perm, err := NewPermutation(rows, seed)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, seed+1))
	z := rand.NewZipf(r, s, 1, rows-1)
	keys := make([]int64, count)
	for i := range keys {
		keys[i] = int64(perm.At(z.Uint64())) + 1
	}
	return keys, nil
}

// Distinct returns the distinct keys of keys, in the order of their first
// appearance.
func Distinct(keys []int64) []int64 {
	seen := make(map[int64]bool, len(keys))
	var out []int64
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
