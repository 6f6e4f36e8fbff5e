package advise

import (
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/warmcache/warmcache/internal/zdict"
)

// dictSamples is how many values of the sample the dictionary is trained
// on; the rest are held out to choose between zdict's two dictionaries.
const dictSamples = 2_000

// dictionary is the zstd dictionary the service would train on a
// namespace's values (zdict.Train), with the encoder and decoder that use
// it. EncodeAll and DecodeAll are safe for concurrent use.
type dictionary struct {
	// raw is the dictionary; nil when the sample is too small or too
	// uniform to train one, and values are compressed without.
	raw []byte
	// err says why raw is nil.
	err error
	// ratio is the compression of single values with the dictionary, as
	// the service stores them: their total size over their total
	// compressed size, dictionary ids included.
	ratio float64
	enc   *zstd.Encoder
	dec   *zstd.Decoder
}

// trainDictionary trains a zstd dictionary on values and measures it on
// them, one value at a time, as a bytea column or a cache entry holds them.
// The caller closes it.
func trainDictionary(values [][]byte) (*dictionary, error) {
	n := min(len(values), dictSamples)
	d := &dictionary{}
	d.raw, d.err = zdict.Train(values[:n], values[n:], zdict.Options{})
	sizes, err := zdict.Measure(d.raw, values[:n])
	if err != nil {
		return nil, fmt.Errorf("advise: %w", err)
	}
	d.ratio = sizes.DictRatio()
	if d.raw == nil {
		d.ratio = sizes.ZstdRatio()
	}
	if d.enc, err = zdict.NewEncoder(d.raw); err != nil {
		return nil, fmt.Errorf("advise: %w", err)
	}
	if d.dec, err = zdict.NewDecoder(d.raw); err != nil {
		_ = d.enc.Close()
		return nil, fmt.Errorf("advise: %w", err)
	}
	return d, nil
}

// Close releases the encoder and decoder.
func (d *dictionary) Close() {
	_ = d.enc.Close() // Close of an encoder used only through EncodeAll has nothing to flush
	d.dec.Close()
}
