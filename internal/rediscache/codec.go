package rediscache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/zstd"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The value codec. A namespace's Codec says how its present values are
// stored (see format.go for the header every format shares):
//
//   - none: format '1', the JSON bytes as they are;
//   - zstd: format '2', one zstd frame per value;
//   - zstd-dict: format '3', a 4-byte dictionary id and one zstd frame
//     compressed with that dictionary, trained on the namespace's own
//     values (TrainDictionary). Small JSON documents share most of their
//     bytes with each other but little within themselves, so a dictionary
//     compresses them many times better than zstd alone.
//
// A value that does not shrink is stored raw whatever the codec, and so is
// an absent entry. Values are encoded when they are filled; Get returns the
// JSON bytes.
//
// Dictionaries are versioned by their id, which is derived from their
// content, so two dictionaries with the same id are the same dictionary. A
// Cache keeps every dictionary it was given, for decoding, and encodes with
// the one given last for the namespace. A value whose dictionary the Cache
// does not know (written by an instance that loaded a newer one, say) is a
// miss, counted in warmcache_redis_undecodable_total, never an error: the
// service reads it again from the warehouse.
//
// Frames carry no checksum: the 4 bytes would be a tenth of a typical
// dictionary-compressed document, the frame header still names the
// dictionary (which the decoder checks), and a dictionary id names exactly
// one content.

// DefaultDictionarySize is the size TrainDictionary aims at when none is
// given: 16 KiB, which holds the common parts of small JSON documents many
// times over.
const DefaultDictionarySize = 16 << 10

const (
	// maxDictionarySize bounds a dictionary, so that the encoder's window
	// (codecWindow) reaches from any value back into all of it.
	maxDictionarySize = 64 << 10
	// minDictionarySize is the smallest size worth training.
	minDictionarySize = 1 << 10
	// codecWindow is the zstd window. Values are small; a small window
	// keeps the encoders' buffers small and their resets cheap.
	codecWindow = 128 << 10
	// maxDecodedBytes bounds what one value may decompress to, so that a
	// damaged frame cannot claim gigabytes.
	maxDecodedBytes = 64 << 20
	// dictIDLen is the length of the dictionary id that starts a format
	// '3' payload.
	dictIDLen = 4
	// dictMagic starts every zstd dictionary; the id follows it.
	dictMagic = "\x37\xa4\x30\xec"
	// firstPrivateDictID is the lowest dictionary id the zstd format leaves
	// to private use; ids below it are reserved for registered dictionaries.
	firstPrivateDictID = 32768
)

// encoderLevel is the zstd level of every encoder. On small JSON documents
// the faster levels compress as well as the slower ones (measured on the
// widget documents: within 1%), and cost less per fill.
const encoderLevel = zstd.SpeedFastest

// errUnknownDictionary marks a format '3' value whose dictionary the Cache
// does not know.
var errUnknownDictionary = errors.New("unknown dictionary")

// codecs holds a Cache's zstd encoders and decoders. An encoder or decoder
// is expensive to build and holds its own pool of internal states, so each
// is built once and shared: EncodeAll and DecodeAll are safe for
// concurrent use. codecs is safe for concurrent use.
type codecs struct {
	plainEnc *zstd.Encoder
	plainDec *zstd.Decoder

	mu    sync.Mutex // serializes AddDictionary
	dicts atomic.Pointer[dictSet]
}

// dictSet is an immutable snapshot of the known dictionaries; AddDictionary
// replaces it whole, so readers never lock.
type dictSet struct {
	// decoders holds every known dictionary.
	decoders map[dictKey]*zstd.Decoder
	// encoders holds the dictionary each namespace encodes with.
	encoders map[string]dictEncoder
}

type dictKey struct {
	namespace string
	id        uint32
}

type dictEncoder struct {
	id  uint32
	enc *zstd.Encoder
}

func newCodecs() (*codecs, error) {
	enc, err := newEncoder(nil)
	if err != nil {
		return nil, err
	}
	dec, err := newDecoder(nil)
	if err != nil {
		return nil, err
	}
	c := &codecs{plainEnc: enc, plainDec: dec}
	c.dicts.Store(&dictSet{decoders: map[dictKey]*zstd.Decoder{}, encoders: map[string]dictEncoder{}})
	return c, nil
}

// newEncoder returns an encoder, with dictionary d when d is not nil.
func newEncoder(d []byte) (*zstd.Encoder, error) {
	opts := []zstd.EOption{
		zstd.WithEncoderLevel(encoderLevel),
		zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(codecWindow),
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

// newDecoder returns a decoder, with dictionary d when d is not nil.
func newDecoder(d []byte) (*zstd.Decoder, error) {
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

// close releases the decoders.
func (c *codecs) close() {
	c.plainDec.Close()
	for _, d := range c.dicts.Load().decoders {
		d.Close()
	}
}

// encodeValue returns the stored form of e in ns's codec: the header and
// the payload in one allocation.
func (c *codecs) encodeValue(ns *warmcache.Namespace, e warmcache.Entry) ([]byte, error) {
	if !e.Found || len(e.Value) == 0 || ns.Codec == "" || ns.Codec == warmcache.CodecNone {
		return encode(e)
	}
	b := make([]byte, headerLen, headerLen+dictIDLen+len(e.Value))
	format := byte(formatZstd)
	enc := c.plainEnc
	if ns.Codec == warmcache.CodecZstdDict {
		if d, ok := c.dicts.Load().encoders[ns.Name]; ok {
			format, enc = formatZstdDict, d.enc
			b = binary.BigEndian.AppendUint32(b, d.id)
		}
	}
	if err := putHeader(b, format, e); err != nil {
		return nil, err
	}
	b = enc.EncodeAll(e.Value, b)
	if len(b)-headerLen >= len(e.Value) {
		return encode(e) // it did not shrink
	}
	return b, nil
}

// decodeValue returns the JSON bytes of a payload in format. The error is
// errUnknownDictionary, or the decompressor's for a damaged payload.
func (c *codecs) decodeValue(ns *warmcache.Namespace, format byte, payload []byte) ([]byte, error) {
	switch format {
	case formatZstd:
		return c.plainDec.DecodeAll(payload, nil)
	case formatZstdDict:
		if len(payload) < dictIDLen {
			return nil, errors.New("payload shorter than a dictionary id")
		}
		id := binary.BigEndian.Uint32(payload)
		dec, ok := c.dicts.Load().decoders[dictKey{ns.Name, id}]
		if !ok {
			return nil, errUnknownDictionary
		}
		return dec.DecodeAll(payload[dictIDLen:], nil)
	default:
		return payload, nil
	}
}

// AddDictionary makes a zstd dictionary of namespace known to the Cache: it
// decodes the namespace's values written with it from now on, and it
// becomes the dictionary the namespace's values are encoded with when the
// namespace's codec is zstd-dict. Dictionaries added before stay known for
// decoding. Add them oldest first, so that the newest encodes; adding a
// known dictionary again makes it the encoding one again. It returns the
// dictionary's id. The error reports a dictionary that zstd cannot load.
// AddDictionary is safe for concurrent use with every other method.
func (c *Cache) AddDictionary(namespace string, d []byte) (uint32, error) {
	id, err := DictionaryID(d)
	if err != nil {
		return 0, fmt.Errorf("rediscache: add dictionary for %q: %w", namespace, err)
	}
	enc, err := newEncoder(d)
	if err != nil {
		return 0, fmt.Errorf("rediscache: add dictionary %d for %q: %w", id, namespace, err)
	}
	cs := c.codecs
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cur := cs.dicts.Load()
	next := &dictSet{
		decoders: make(map[dictKey]*zstd.Decoder, len(cur.decoders)+1),
		encoders: make(map[string]dictEncoder, len(cur.encoders)+1),
	}
	for k, v := range cur.decoders {
		next.decoders[k] = v
	}
	for k, v := range cur.encoders {
		next.encoders[k] = v
	}
	key := dictKey{namespace, id}
	if _, ok := next.decoders[key]; !ok {
		dec, err := newDecoder(d)
		if err != nil {
			return 0, fmt.Errorf("rediscache: add dictionary %d for %q: %w", id, namespace, err)
		}
		next.decoders[key] = dec
	}
	next.encoders[namespace] = dictEncoder{id: id, enc: enc}
	cs.dicts.Store(next)
	c.log.Info("redis value dictionary added",
		"namespace", namespace, "dictionary_id", id, "bytes", len(d), "known", countFor(next, namespace))
	return id, nil
}

// countFor returns how many dictionaries of namespace s holds.
func countFor(s *dictSet, namespace string) int {
	n := 0
	for k := range s.decoders {
		if k.namespace == namespace {
			n++
		}
	}
	return n
}

// DictionaryID returns the id of a zstd dictionary: the one in its header.
// The error reports bytes that are not a zstd dictionary.
func DictionaryID(d []byte) (uint32, error) {
	if len(d) < 8 || string(d[:4]) != dictMagic {
		return 0, errors.New("not a zstd dictionary")
	}
	id := binary.LittleEndian.Uint32(d[4:8])
	if id == 0 {
		return 0, errors.New("zstd dictionary has id 0")
	}
	return id, nil
}

// TrainOptions configure TrainDictionary. The zero value is ready to use.
type TrainOptions struct {
	// Size bounds the dictionary in bytes, between 1 KiB and 64 KiB. Zero
	// means DefaultDictionarySize.
	Size int
}

// TrainDictionary builds a zstd dictionary from samples, values of one
// namespace as the warehouse returns them (a few thousand, picked at
// random, are plenty). It tries two dictionaries and keeps the one that
// compresses heldOut (other values of the namespace; samples when heldOut
// is empty) into fewer bytes:
//
//   - the samples themselves, concatenated up to the size, with entropy
//     tables built from all of them: best for documents that share most of
//     their text, such as records of one schema;
//   - the substrings that recur most across the samples (klauspost's
//     dictionary builder): best for more varied values.
//
// The dictionary's id is derived from its content, in the range the zstd
// format leaves to private use, so the same content always has the same id
// and different contents almost surely do not. TrainDictionary is safe for
// concurrent use. It fails when there are no samples or when neither
// dictionary can be built.
func TrainDictionary(samples, heldOut [][]byte, opts TrainOptions) ([]byte, error) {
	size := opts.Size
	if size == 0 {
		size = DefaultDictionarySize
	}
	if size < minDictionarySize || size > maxDictionarySize {
		return nil, fmt.Errorf("rediscache: train dictionary: size %d is not between %d and %d", size, minDictionarySize, maxDictionarySize)
	}
	var nonEmpty [][]byte
	for _, s := range samples {
		if len(s) > 0 {
			nonEmpty = append(nonEmpty, s)
		}
	}
	if len(nonEmpty) == 0 {
		return nil, errors.New("rediscache: train dictionary: no samples")
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
		sizes, err := MeasureCompression(d, heldOut)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if best == nil || sizes.Dict < bestSize {
			best, bestSize = d, sizes.Dict
		}
	}
	if best == nil {
		return nil, fmt.Errorf("rediscache: train dictionary: %w", errors.Join(errs...))
	}
	binary.LittleEndian.PutUint32(best[4:8], contentID(best))
	return best, nil
}

// provisionalDictID is the id a dictionary is built with before its
// content decides its real one.
const provisionalDictID = firstPrivateDictID

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
			ID:       provisionalDictID,
			Contents: samples,
			History:  history,
			Offsets:  [3]int{1, 4, 8},
			Level:    encoderLevel,
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
		ZstdDictID:  provisionalDictID,
		ZstdLevel:   encoderLevel,
	})
	if err != nil {
		return nil, fmt.Errorf("substring dictionary: %w", err)
	}
	return d, nil
}

// contentID returns the id of dictionary d: a hash of its bytes other than
// the id itself, in [32768, 2^31).
func contentID(d []byte) uint32 {
	h := fnv.New32a()
	h.Write(d[:4])
	h.Write(d[8:])
	return firstPrivateDictID + h.Sum32()%(1<<31-firstPrivateDictID)
}

// CompressionSizes are the sizes of a set of values under each codec, as a
// Cache would store their payloads (without the header every format
// shares).
type CompressionSizes struct {
	// Values is the number of values.
	Values int
	// JSON is their total size as JSON, which the codec none stores.
	JSON int64
	// Zstd is their total size under the codec zstd.
	Zstd int64
	// Dict is their total size under the codec zstd-dict, dictionary id
	// included; zero when no dictionary was measured.
	Dict int64
}

// ZstdRatio returns JSON / Zstd, or zero when nothing was measured.
func (s CompressionSizes) ZstdRatio() float64 { return ratio(s.JSON, s.Zstd) }

// DictRatio returns JSON / Dict, or zero when nothing was measured.
func (s CompressionSizes) DictRatio() float64 { return ratio(s.JSON, s.Dict) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// MeasureCompression returns the sizes values would take in Redis under
// each codec, with dictionary d for zstd-dict (nil measures none). A value
// that does not shrink counts at its JSON size, as the Cache stores it raw.
// It is safe for concurrent use; the error reports a dictionary that zstd
// cannot load.
func MeasureCompression(d []byte, values [][]byte) (CompressionSizes, error) {
	plain, err := newEncoder(nil)
	if err != nil {
		return CompressionSizes{}, err
	}
	var withDict *zstd.Encoder
	if d != nil {
		if withDict, err = newEncoder(d); err != nil {
			return CompressionSizes{}, err
		}
	}
	s := CompressionSizes{Values: len(values)}
	var buf []byte
	for _, v := range values {
		n := int64(len(v))
		s.JSON += n
		buf = plain.EncodeAll(v, buf[:0])
		s.Zstd += min(n, int64(len(buf)))
		if withDict != nil {
			buf = withDict.EncodeAll(v, buf[:0])
			s.Dict += min(n, int64(dictIDLen+len(buf)))
		}
	}
	return s, nil
}
