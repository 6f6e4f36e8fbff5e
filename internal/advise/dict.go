package advise

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// The dictionary training: its history is the most recent values of the
// sample up to dictBytes, and its entropy tables come from up to
// dictSamples values.
const (
	dictBytes   = 16 << 10
	dictSamples = 2_000
)

// dictionary is a zstd dictionary trained on a namespace's own values,
// with an encoder and a decoder that use it. EncodeAll and DecodeAll are
// safe for concurrent use.
type dictionary struct {
	raw []byte
	// ratio is the compression of single values with the dictionary:
	// their total size over their total compressed size.
	ratio float64
	enc   *zstd.Encoder
	dec   *zstd.Decoder
}

// trainDictionary builds a zstd dictionary from values and measures it on
// them, one value at a time, as a bytea column or a cache entry holds them.
// The caller closes it.
func trainDictionary(values [][]byte) (*dictionary, error) {
	samples := values[:min(len(values), dictSamples)]
	var hist []byte
	for i := len(samples) - 1; i >= 0 && len(hist) < dictBytes; i-- {
		hist = append(samples[i][:len(samples[i]):len(samples[i])], hist...)
	}
	if len(hist) > dictBytes {
		hist = hist[len(hist)-dictBytes:]
	}
	for len(hist) < 8 {
		hist = append(hist, ' ')
	}
	raw, err := zstd.BuildDict(zstd.BuildDictOptions{
		ID:       1,
		Contents: samples,
		History:  hist,
		Offsets:  [3]int{1, 4, 8},
		Level:    zstd.SpeedDefault,
	})
	encDict, decDict := zstd.WithEncoderDict(raw), zstd.WithDecoderDicts(raw)
	if err != nil {
		// Too few distinct values to build entropy tables (all of them
		// fit in the history): use the history alone as a raw-content
		// dictionary.
		raw = hist
		encDict, decDict = zstd.WithEncoderDictRaw(1, raw), zstd.WithDecoderDictRaw(1, raw)
	}
	d := &dictionary{raw: raw}
	if d.enc, err = zstd.NewWriter(nil, encDict, zstd.WithEncoderConcurrency(1)); err != nil {
		return nil, fmt.Errorf("advise: zstd encoder: %w", err)
	}
	if d.dec, err = zstd.NewReader(nil, decDict, zstd.WithDecoderConcurrency(1)); err != nil {
		d.enc.Close()
		return nil, fmt.Errorf("advise: zstd decoder: %w", err)
	}
	var in, out int
	for _, v := range samples {
		in += len(v)
		out += len(d.enc.EncodeAll(v, nil))
	}
	d.ratio = float64(in) / float64(max(out, 1))
	return d, nil
}

// Close releases the encoder and decoder.
func (d *dictionary) Close() {
	_ = d.enc.Close() // Close of an encoder used only through EncodeAll has nothing to flush
	d.dec.Close()
}
