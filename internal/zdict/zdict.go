// Package zdict owns warmcache's zstd dictionaries: how one is trained on a
// namespace's values, how it is identified, and the encoders and decoders
// that compress single small values with it. The Redis value codec
// (package rediscache) and the storage advisor (package advise) both use
// it, so that the advisor measures the dictionary the service would use.
//
// A dictionary's id is derived from its content, in the range the zstd
// format leaves to private use, so the same content always has the same id
// and different contents almost surely do not. Stores write the id before
// each compressed value, in IDLen bytes.
//
// Everything in the package is safe for concurrent use.
package zdict

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/zstd"
)

// DefaultSize is the size Train aims at when none is given: 16 KiB, which
// holds the common parts of small JSON documents many times over.
const DefaultSize = 16 << 10

const (
	// maxSize bounds a dictionary, so that the encoder's window (window)
	// reaches from any value back into all of it.
	maxSize = 64 << 10
	// minSize is the smallest size worth training.
	minSize = 1 << 10
	// window is the zstd window. Values are small; a small window keeps
	// the encoders' buffers small and their resets cheap.
	window = 128 << 10
	// maxDecodedBytes bounds what one value may decompress to, so that a
	// damaged frame cannot claim gigabytes.
	maxDecodedBytes = 64 << 20
	// magic starts every zstd dictionary; the id follows it.
	magic = "\x37\xa4\x30\xec"
	// firstPrivateID is the lowest dictionary id the zstd format leaves
	// to private use; ids below it are reserved for registered
	// dictionaries.
	firstPrivateID = 32768
	// provisionalID is the id a dictionary is built with before its
	// content decides its real one.
	provisionalID = firstPrivateID
)

// IDLen is the length of the dictionary id that stores write before a value
// compressed with the dictionary.
const IDLen = 4

// level is the zstd level of every encoder. On small JSON documents the
// faster levels compress about as well as the slower ones, and cost less
// per value (docs/redis.md#compression-in-redis).
const level = zstd.SpeedFastest

// NewEncoder returns an encoder for single small values, with dictionary d
// when d is not nil: the fastest level, no checksum (a dictionary id names
// exactly one content, and 4 bytes would be a tenth of a typical
// compressed document) and a small window. Its EncodeAll is safe for
// concurrent use. The error reports a dictionary zstd cannot load.
func NewEncoder(d []byte) (*zstd.Encoder, error) {
	opts := []zstd.EOption{
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(window),
	}
	if d != nil {
		opts = append(opts, zstd.WithEncoderDict(d))
	}
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return enc, nil
}

// NewDecoder returns a decoder of the values NewEncoder compresses, with
// dictionary d when d is not nil. It refuses to decode a value to more than
// 64 MiB. Its DecodeAll is safe for concurrent use; Close releases it. The
// error reports a dictionary zstd cannot load.
func NewDecoder(d []byte) (*zstd.Decoder, error) {
	opts := []zstd.DOption{zstd.WithDecoderMaxMemory(maxDecodedBytes)}
	if d != nil {
		opts = append(opts, zstd.WithDecoderDicts(d))
	}
	dec, err := zstd.NewReader(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return dec, nil
}

// ID returns the id of a zstd dictionary: the one in its header. The error
// reports bytes that are not a zstd dictionary.
func ID(d []byte) (uint32, error) {
	if len(d) < 8 || string(d[:4]) != magic {
		return 0, errors.New("not a zstd dictionary")
	}
	id := binary.LittleEndian.Uint32(d[4:8])
	if id == 0 {
		return 0, errors.New("zstd dictionary has id 0")
	}
	return id, nil
}

// contentID returns the id of dictionary d: a hash of its bytes other than
// the id itself, in [32768, 2^31).
func contentID(d []byte) uint32 {
	h := fnv.New32a()
	h.Write(d[:4])
	h.Write(d[8:])
	return firstPrivateID + h.Sum32()%(1<<31-firstPrivateID)
}

// Options configure Train. The zero value is ready to use.
type Options struct {
	// Size bounds the dictionary in bytes, between 1 KiB and 64 KiB. Zero
	// means DefaultSize.
	Size int
}

// Train builds a zstd dictionary from samples, values of one namespace as
// the warehouse returns them (a few thousand, picked at random, are
// plenty). It tries two dictionaries and keeps the one that compresses
// heldOut (other values of the namespace; samples when heldOut is empty)
// into fewer bytes, as Measure counts them:
//
//   - the samples themselves, concatenated up to the size, with entropy
//     tables built from all of them: best for documents that share most of
//     their text, such as records of one schema;
//   - the substrings that recur most across the samples (klauspost's
//     dictionary builder): best for more varied values.
//
// The dictionary's id is derived from its content. Train fails when there
// are no samples or when neither dictionary can be built.
func Train(samples, heldOut [][]byte, opts Options) ([]byte, error) {
	size := opts.Size
	if size == 0 {
		size = DefaultSize
	}
	if size < minSize || size > maxSize {
		return nil, fmt.Errorf("zdict: train: size %d is not between %d and %d", size, minSize, maxSize)
	}
	var nonEmpty [][]byte
	for _, s := range samples {
		if len(s) > 0 {
			nonEmpty = append(nonEmpty, s)
		}
	}
	if len(nonEmpty) == 0 {
		return nil, errors.New("zdict: train: no samples")
	}
	if len(heldOut) == 0 {
		heldOut = nonEmpty
	}
	var (
		best     []byte
		bestSize int64
		errs     []error
	)
	for _, build := range []func([][]byte, int) ([]byte, error){samplesDictionary, substringDictionary} {
		d, err := build(nonEmpty, size)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sizes, err := Measure(d, heldOut)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if best == nil || sizes.Dict < bestSize {
			best, bestSize = d, sizes.Dict
		}
	}
	if best == nil {
		return nil, fmt.Errorf("zdict: train: %w", errors.Join(errs...))
	}
	binary.LittleEndian.PutUint32(best[4:8], contentID(best))
	return best, nil
}

// samplesDictionary builds a dictionary whose content is distinct samples
// concatenated, within size. zstd builds the entropy tables from the
// literals left when the samples are compressed against that content, so
// when every sample fits in it there are none: the content then takes the
// first half of the distinct samples, then a quarter, until some are left
// out.
func samplesDictionary(samples [][]byte, size int) ([]byte, error) {
	// The entropy tables take a few hundred bytes besides the content.
	budget := size - size/16
	var distinct [][]byte
	seen := map[string]bool{}
	total := 0
	for _, s := range samples {
		if seen[string(s)] {
			continue
		}
		seen[string(s)] = true
		distinct = append(distinct, s)
		if total += len(s); total >= budget {
			break
		}
	}
	var err error
	for keep := len(distinct); keep > 0; keep /= 2 {
		var history []byte
		for _, s := range distinct[:keep] {
			history = append(history, s[:min(len(s), budget-len(history))]...)
		}
		var d []byte
		if d, err = buildSamplesDictionary(samples, history, size); err == nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("samples dictionary: %w", err)
}

// buildSamplesDictionary builds a dictionary with history as its content
// and the entropy tables of samples, trimming the oldest history until it
// fits in size.
func buildSamplesDictionary(samples [][]byte, history []byte, size int) ([]byte, error) {
	for {
		d, err := zstd.BuildDict(zstd.BuildDictOptions{
			ID:       provisionalID,
			Contents: samples,
			History:  history,
			Offsets:  [3]int{1, 4, 8},
			Level:    level,
		})
		if err != nil {
			return nil, err
		}
		if over := len(d) - size; over > 0 && len(history) > over {
			history = history[over:]
			continue
		}
		return d, nil
	}
}

// substringDictionary builds a dictionary of recurring substrings with
// klauspost's dictionary builder. The builder is experimental and panics on
// some small or uniform inputs; a panic is returned as an error.
func substringDictionary(samples [][]byte, size int) (d []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("substring dictionary: builder failed: %v", p)
		}
	}()
	d, err = dict.BuildZstdDict(samples, dict.Options{
		MaxDictSize: size,
		HashBytes:   6,
		ZstdDictID:  provisionalID,
		ZstdLevel:   level,
	})
	if err != nil {
		return nil, fmt.Errorf("substring dictionary: %w", err)
	}
	return d, nil
}

// Sizes are the sizes of a set of values stored one at a time, compressed
// by the encoders of NewEncoder.
type Sizes struct {
	// Values is the number of values.
	Values int
	// JSON is their total size as they are.
	JSON int64
	// Zstd is their total size compressed without a dictionary.
	Zstd int64
	// Dict is their total size compressed with the dictionary, each with
	// its IDLen-byte dictionary id; zero when no dictionary was measured.
	Dict int64
}

// ZstdRatio returns JSON / Zstd, or zero when nothing was measured.
func (s Sizes) ZstdRatio() float64 { return ratio(s.JSON, s.Zstd) }

// DictRatio returns JSON / Dict, or zero when nothing was measured.
func (s Sizes) DictRatio() float64 { return ratio(s.JSON, s.Dict) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Measure returns the sizes values take compressed one at a time, with
// dictionary d (nil measures none). A value that does not shrink counts at
// its own size, as a store keeps it raw. The error reports a dictionary
// that zstd cannot load.
func Measure(d []byte, values [][]byte) (Sizes, error) {
	plain, err := NewEncoder(nil)
	if err != nil {
		return Sizes{}, err
	}
	var withDict *zstd.Encoder
	if d != nil {
		if withDict, err = NewEncoder(d); err != nil {
			return Sizes{}, err
		}
	}
	s := Sizes{Values: len(values)}
	var buf []byte
	for _, v := range values {
		n := int64(len(v))
		s.JSON += n
		buf = plain.EncodeAll(v, buf[:0])
		s.Zstd += min(n, int64(len(buf)))
		if withDict != nil {
			buf = withDict.EncodeAll(v, buf[:0])
			s.Dict += min(n, int64(IDLen+len(buf)))
		}
	}
	return s, nil
}
