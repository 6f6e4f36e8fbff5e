package tiertest

import "math/rand/v2"

// OpaqueValues are the values that every test of the bytes layout
// round-trips, through a tier or a transport: every byte 0x00-0xFF, 1 MiB
// of random bytes (the default value bound), no bytes, and bytes that are
// not JSON. The random bytes are the same in every call. Each call
// returns new slices, which a test may change.
func OpaqueValues() map[string][]byte {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	random := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(21, 2))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	return map[string][]byte{"every-byte": every, "1MiB": random, "empty": {}, "text": []byte("not json")}
}
