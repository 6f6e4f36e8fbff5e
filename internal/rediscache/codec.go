package rediscache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/zdict"
)

// The value codec. A namespace's Codec says how its present values are
// stored (see format.go for the header every format shares):
//
//   - none: format '1', the value's bytes as they are;
//   - zstd: format '2', one zstd frame per value;
//   - zstd-dict: format '3', a 4-byte dictionary id and one zstd frame
//     compressed with that dictionary, trained on the namespace's own
//     values (zdict.Train). Small JSON documents share most of their
//     bytes with each other but little within themselves, so a dictionary
//     compresses them many times better than zstd alone.
//
// A value that does not shrink is stored raw whatever the codec, and so is
// an absent entry. Values are encoded when they are filled; Get returns the
// value's bytes.
//
// Dictionaries are versioned by their id (zdict.ID), which is derived from
// their content, so two dictionaries with the same id are the same one. A
// Cache keeps every dictionary it was given, for decoding, and encodes with
// the one given last for the namespace. A value whose dictionary the Cache
// does not know (written by an instance that loaded a newer one, say) is a
// miss, counted in warmcache_redis_undecodable_total, never an error: the
// service reads it again from the warehouse.
//
// Frames carry no checksum (see zdict.NewEncoder): the frame header still
// names the dictionary, which the decoder checks.

// dictIDLen is the length of the dictionary id that starts a format '3'
// payload.
const dictIDLen = zdict.IDLen

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
	enc, err := zdict.NewEncoder(nil)
	if err != nil {
		return nil, err
	}
	dec, err := zdict.NewDecoder(nil)
	if err != nil {
		return nil, err
	}
	c := &codecs{plainEnc: enc, plainDec: dec}
	c.dicts.Store(&dictSet{decoders: map[dictKey]*zstd.Decoder{}, encoders: map[string]dictEncoder{}})
	return c, nil
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
	b := make([]byte, headerSize(e), headerSize(e)+dictIDLen+len(e.Value))
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
	if len(b)-headerSize(e) >= len(e.Value) {
		return encode(e) // it did not shrink
	}
	return b, nil
}

// decodeValue returns the value's bytes of a payload in format. The error is
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
	id, err := zdict.ID(d)
	if err != nil {
		return 0, fmt.Errorf("rediscache: add dictionary for %q: %w", namespace, err)
	}
	enc, err := zdict.NewEncoder(d)
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
		dec, err := zdict.NewDecoder(d)
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
