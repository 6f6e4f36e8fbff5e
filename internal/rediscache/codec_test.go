package rediscache_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
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

// trainWidgets trains a dictionary on n widget documents of seed.
func trainWidgets(tb testing.TB, n int, seed uint64) []byte {
	tb.Helper()
	d, err := zdict.Train(widgetDocs(n, seed), widgetDocs(50, seed+1000), zdict.Options{})
	if err != nil {
		tb.Fatalf("Train: %v", err)
	}
	return d
}

// addDictionary adds d for namespace to c and returns its id.
func addDictionary(tb testing.TB, c *rediscache.Cache, namespace string, d []byte) uint32 {
	tb.Helper()
	id, err := c.AddDictionary(namespace, d)
	if err != nil {
		tb.Fatalf("AddDictionary: %v", err)
	}
	return id
}

// stored returns the raw value Redis holds for key.
func (f *fixture) stored(tb testing.TB, ns *warmcache.Namespace, key string) []byte {
	tb.Helper()
	b, err := f.raw.Get(testContext(tb), f.redisKey(ns, key)).Bytes()
	if err != nil {
		tb.Fatalf("raw get %s: %v", key, err)
	}
	return b
}

// bytesNS returns a bytes namespace with codec.
func bytesNS(codec warmcache.Codec) *warmcache.Namespace {
	return &warmcache.Namespace{Name: "bytes-" + string(codec), Layout: warmcache.LayoutBytes, Codec: codec}
}

// everyByte returns the bytes 0x00 to 0xFF.
func everyByte() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// randomBytes returns n random bytes from a fixed seed.
func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(21, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCodecRoundTrip(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	dictID := addDictionary(t, f.cache, "dict", trainWidgets(t, 300, 1))
	doc := widgetDoc(42)
	tests := []struct {
		name  string
		ns    *warmcache.Namespace
		entry warmcache.Entry
		// format is the format byte Redis must hold.
		format byte
		// smaller says the stored payload must be smaller than the JSON.
		smaller bool
	}{
		{"none", &warmcache.Namespace{Name: "none", Codec: warmcache.CodecNone}, present(1, string(doc)), '1', false},
		{"empty codec is none", &warmcache.Namespace{Name: "empty"}, present(1, string(doc)), '1', false},
		{"zstd", &warmcache.Namespace{Name: "zstd", Codec: warmcache.CodecZstd}, present(1, string(doc)), '2', true},
		{"zstd-dict", &warmcache.Namespace{Name: "dict", Codec: warmcache.CodecZstdDict}, present(1, string(doc)), '3', true},
		{"zstd-dict without a dictionary falls back to zstd",
			&warmcache.Namespace{Name: "nodict", Codec: warmcache.CodecZstdDict}, present(1, string(doc)), '2', true},
		{"a value that does not shrink is raw",
			&warmcache.Namespace{Name: "zstd", Codec: warmcache.CodecZstd}, present(1, `{"a":1}`), '1', false},
		{"absent is raw", &warmcache.Namespace{Name: "dict", Codec: warmcache.CodecZstdDict}, absent(7), '1', false},
		{"empty value", &warmcache.Namespace{Name: "zstd", Codec: warmcache.CodecZstd}, present(1, ""), '1', false},
		// A bytes namespace's values are any bytes; every codec takes them.
		{"bytes every byte", bytesNS(warmcache.CodecNone), present(1, string(everyByte())), '1', false},
		{"bytes every byte zstd", bytesNS(warmcache.CodecZstd), present(1, strings.Repeat(string(everyByte()), 8)), '2', true},
		{"bytes every byte zstd-dict", bytesNS(warmcache.CodecZstdDict), present(1, strings.Repeat(string(everyByte()), 8)), '2', true},
		{"bytes 1 MiB random zstd is raw", bytesNS(warmcache.CodecZstd), present(1, string(randomBytes(1<<20))), '1', false},
		{"bytes 1 MiB of zeros zstd", bytesNS(warmcache.CodecZstd), present(1, string(make([]byte, 1<<20))), '2', true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := strconv.Quote(tt.name)
			f.fill(t, tt.ns, key, tt.entry)
			got, hit := f.get(t, tt.ns, key)
			if !hit || !sameEntry(got, tt.entry) {
				t.Fatalf("Get = %+v, hit %v; want %+v", got, hit, tt.entry)
			}
			raw := f.stored(t, tt.ns, key)
			if raw[0] != tt.format {
				t.Errorf("stored format %q, want %q", raw[0], tt.format)
			}
			payload := raw[rediscache.HeaderLen:]
			if tt.smaller && len(payload) >= len(tt.entry.Value) {
				t.Errorf("stored payload is %d bytes for %d bytes of JSON", len(payload), len(tt.entry.Value))
			}
			if tt.format == '3' && binary.BigEndian.Uint32(payload) != dictID {
				t.Errorf("payload names dictionary %d, want %d", binary.BigEndian.Uint32(payload), dictID)
			}
			if tt.format == '1' && !bytes.Equal(payload, tt.entry.Value) {
				t.Errorf("raw payload %q, want %q", payload, tt.entry.Value)
			}
		})
	}
	t.Run("GetMany decodes every format", func(t *testing.T) {
		ns := &warmcache.Namespace{Name: "dict", Codec: warmcache.CodecZstdDict}
		keys := []warmcache.Key{{Text: "m1"}, {Text: "m2"}, {Text: "m3"}}
		want := []warmcache.Entry{present(1, string(widgetDoc(1))), present(2, `{"a":1}`), absent(3)}
		if err := fillMany(testContext(t), f.cache, ns, keys, want); err != nil {
			t.Fatalf("FillMany: %v", err)
		}
		if f.stored(t, ns, "m1")[0] != '3' {
			t.Errorf("m1 stored in format %q, want '3'", f.stored(t, ns, "m1")[0])
		}
		got, hits, err := f.cache.GetMany(testContext(t), ns, keys)
		if err != nil {
			t.Fatalf("GetMany: %v", err)
		}
		for i := range keys {
			if !hits[i] || !sameEntry(got[i], want[i]) {
				t.Errorf("GetMany[%d] = %+v, hit %v; want %+v", i, got[i], hits[i], want[i])
			}
		}
	})
}

func TestDictionaryRetrain(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets", Codec: warmcache.CodecZstdDict}
	dictA, dictB := trainWidgets(t, 300, 1), trainWidgets(t, 300, 2)
	idA := addDictionary(t, f.cache, ns.Name, dictA)
	f.fill(t, ns, "a", present(1, string(widgetDoc(1))))

	idB := addDictionary(t, f.cache, ns.Name, dictB)
	if idA == idB {
		t.Fatalf("dictionaries trained on different samples share id %d", idA)
	}
	f.fill(t, ns, "b", present(1, string(widgetDoc(2))))

	for key, want := range map[string]uint32{"a": idA, "b": idB} {
		if id := binary.BigEndian.Uint32(f.stored(t, ns, key)[rediscache.HeaderLen:]); id != want {
			t.Errorf("%s is stored with dictionary %d, want %d", key, id, want)
		}
	}
	for key, id := range map[string]int{"a": 1, "b": 2} {
		if got, hit := f.get(t, ns, key); !hit || !sameEntry(got, present(1, string(widgetDoc(id)))) {
			t.Errorf("Get(%s) after the retrain = %+v, hit %v", key, got, hit)
		}
	}

	// Adding A again makes it the encoding dictionary again.
	if id := addDictionary(t, f.cache, ns.Name, dictA); id != idA {
		t.Fatalf("AddDictionary(A) again = %d, want %d", id, idA)
	}
	f.fill(t, ns, "c", present(1, string(widgetDoc(3))))
	if id := binary.BigEndian.Uint32(f.stored(t, ns, "c")[rediscache.HeaderLen:]); id != idA {
		t.Errorf("c is stored with dictionary %d, want %d", id, idA)
	}

	// Another namespace's dictionaries are its own.
	other := &warmcache.Namespace{Name: "other", Codec: warmcache.CodecZstdDict}
	f.fill(t, other, "a", present(1, string(widgetDoc(1))))
	if got := f.stored(t, other, "a")[0]; got != '2' {
		t.Errorf("namespace without a dictionary stored format %q, want '2'", got)
	}
}

func TestUndecodableIsMiss(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	ns := &warmcache.Namespace{Name: "widgets", Codec: warmcache.CodecZstdDict}
	d := trainWidgets(t, 300, 1)
	id := addDictionary(t, f.cache, ns.Name, d)
	f.fill(t, ns, "known", present(5, string(widgetDoc(5))))

	// A second instance on the same keys that has not loaded the dictionary.
	reg := prometheus.NewRegistry()
	other, err := rediscache.New(rediscache.Options{Addrs: []string{f.raw.Options().Addr}, Prefix: f.prefix}, reg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = other.Close() })
	got, hit, err := getOne(testContext(t), other, ns, warmcache.Key{Text: "known"})
	if err != nil || hit {
		t.Fatalf("Get without the dictionary = %+v, hit %v, err %v; want a miss", got, hit, err)
	}
	if n := promregtest.Value(t, reg, "warmcache_redis_undecodable_total", "reason", "unknown_dictionary"); n != 1 {
		t.Errorf("undecodable_total{reason=unknown_dictionary} = %v, want 1", n)
	}
	// Once it loads the dictionary, the value is a hit.
	addDictionary(t, other, ns.Name, d)
	if got, hit, err := getOne(testContext(t), other, ns, warmcache.Key{Text: "known"}); err != nil || !hit || !sameEntry(got, present(5, string(widgetDoc(5)))) {
		t.Errorf("Get after loading the dictionary = %+v, hit %v, err %v", got, hit, err)
	}

	header := "P00000000000000000009" + "0000000000000"
	idBytes := string(binary.BigEndian.AppendUint32(nil, id))
	frame := f.stored(t, ns, "known")[rediscache.HeaderLen+4:]
	tests := []struct {
		name, raw, reason string
	}{
		{"dictionary of another id", "3" + header + string(binary.BigEndian.AppendUint32(nil, id+1)) + string(frame), "unknown_dictionary"},
		{"garbage after a known id", "3" + header + idBytes + "not a zstd frame", "corrupt"},
		{"no room for the id", "3" + header + "ab", "corrupt"},
		{"truncated frame", "3" + header + idBytes + string(frame[:len(frame)/2]), "corrupt"},
		{"garbage zstd", "2" + header + "not a zstd frame", "corrupt"},
		{"dictionary frame as plain zstd", "2" + header + string(frame), "corrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := promregtest.Value(t, f.reg, "warmcache_redis_undecodable_total", "reason", tt.reason)
			if err := f.raw.Set(testContext(t), f.redisKey(ns, tt.name), tt.raw, 0).Err(); err != nil {
				t.Fatalf("raw set: %v", err)
			}
			if got, hit := f.get(t, ns, tt.name); hit {
				t.Errorf("Get = %+v, hit true; want a miss", got)
			}
			if n := promregtest.Value(t, f.reg, "warmcache_redis_undecodable_total", "reason", tt.reason); n != before+1 {
				t.Errorf("undecodable_total{reason=%s} = %v, want %v", tt.reason, n, before+1)
			}
		})
	}
}

// TestCompressedFillVersionRules checks that the fill script orders
// compressed and raw values of one key by version alone: the codec of each
// fill differs, the rules of TestFillVersionRules hold.
func TestCompressedFillVersionRules(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	raw := &warmcache.Namespace{Name: "w", Codec: warmcache.CodecNone}
	zstd := &warmcache.Namespace{Name: "w", Codec: warmcache.CodecZstd}
	dict := &warmcache.Namespace{Name: "w", Codec: warmcache.CodecZstdDict}
	addDictionary(t, f.cache, "w", trainWidgets(t, 300, 1))
	doc := func(id int) string { return string(widgetDoc(id)) }
	type fill struct {
		ns *warmcache.Namespace
		e  warmcache.Entry
	}
	tests := []struct {
		name  string
		fills []fill
		want  warmcache.Entry
	}{
		{"older compressed after newer raw", []fill{{raw, present(5, doc(5))}, {dict, present(4, doc(4))}}, present(5, doc(5))},
		{"older raw after newer compressed", []fill{{dict, present(5, doc(5))}, {raw, present(4, doc(4))}}, present(5, doc(5))},
		{"older zstd after newer dictionary", []fill{{dict, present(5, doc(5))}, {zstd, present(4, doc(4))}}, present(5, doc(5))},
		{"newer compressed after older raw", []fill{{raw, present(4, doc(4))}, {dict, present(5, doc(5))}}, present(5, doc(5))},
		{"newer raw after older compressed", []fill{{zstd, present(4, doc(4))}, {raw, present(5, doc(5))}}, present(5, doc(5))},
		{"equal version renews across codecs", []fill{{raw, present(5, doc(5))}, {dict, present(5, doc(6))}}, present(5, doc(6))},
		{"tombstone beats compressed at its version", []fill{{dict, absent(5)}, {dict, present(5, doc(5))}}, absent(5)},
		{"compressed older than a tombstone", []fill{{raw, absent(6)}, {zstd, present(5, doc(5))}}, absent(6)},
		{"tombstone replaces older compressed", []fill{{dict, present(5, doc(5))}, {raw, absent(6)}}, absent(6)},
		{"read of nothing never replaces compressed", []fill{{dict, present(5, doc(5))}, {raw, absent(0)}}, present(5, doc(5))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, fl := range tt.fills {
				f.fill(t, fl.ns, tt.name, fl.e)
			}
			if got, hit := f.get(t, raw, tt.name); !hit || !sameEntry(got, tt.want) {
				t.Errorf("Get = %+v, hit %v; want %+v", got, hit, tt.want)
			}
		})
	}
}

// TestCompressionRatio checks the codecs on the widget documents, with the
// ratios computed from the bytes Redis holds.
func TestCompressionRatio(t *testing.T) {
	f := newFixture(t, rediscache.Options{})
	d, err := zdict.Train(widgetDocs(2000, 1), widgetDocs(200, 2), zdict.Options{})
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	if len(d) > zdict.DefaultSize {
		t.Errorf("dictionary is %d bytes, want at most %d", len(d), zdict.DefaultSize)
	}
	addDictionary(t, f.cache, "dict", d)

	docs := widgetDocs(100, 3)
	payload := map[warmcache.Codec]int{}
	var jsonBytes int
	for _, codec := range []warmcache.Codec{warmcache.CodecNone, warmcache.CodecZstd, warmcache.CodecZstdDict} {
		ns := &warmcache.Namespace{Name: "dict", Codec: codec}
		for i, doc := range docs {
			key := string(codec) + ":" + strconv.Itoa(i)
			f.fill(t, ns, key, present(1, string(doc)))
			payload[codec] += len(f.stored(t, ns, key)) - rediscache.HeaderLen
			if codec == warmcache.CodecNone {
				jsonBytes += len(doc)
			}
		}
	}
	zstdRatio := float64(jsonBytes) / float64(payload[warmcache.CodecZstd])
	dictRatio := float64(jsonBytes) / float64(payload[warmcache.CodecZstdDict])
	t.Logf("payload bytes per document: none %d, zstd %d (%.1fx), zstd-dict %d (%.1fx)",
		payload[warmcache.CodecNone]/len(docs), payload[warmcache.CodecZstd]/len(docs), zstdRatio,
		payload[warmcache.CodecZstdDict]/len(docs), dictRatio)
	if payload[warmcache.CodecNone] != jsonBytes {
		t.Errorf("codec none stores %d payload bytes for %d bytes of JSON", payload[warmcache.CodecNone], jsonBytes)
	}
	if zstdRatio <= 1 {
		t.Errorf("zstd ratio %.2f, want above 1", zstdRatio)
	}
	if dictRatio < 3*zstdRatio || dictRatio < 5 {
		t.Errorf("zstd-dict ratio %.2f, want at least 5 and 3 times zstd's %.2f", dictRatio, zstdRatio)
	}

	// Every fill of this test is in namespace "dict".
	wantStored := payload[warmcache.CodecNone] + payload[warmcache.CodecZstd] + payload[warmcache.CodecZstdDict]
	if got := promregtest.Value(t, f.reg, "warmcache_redis_fill_bytes_total", "form", "json"); got != float64(3*jsonBytes) {
		t.Errorf("fill_bytes_total{form=json} = %v, want %d", got, 3*jsonBytes)
	}
	if got := promregtest.Value(t, f.reg, "warmcache_redis_fill_bytes_total", "form", "stored"); got != float64(wantStored) {
		t.Errorf("fill_bytes_total{form=stored} = %v, want %d", got, wantStored)
	}

	sizes, err := zdict.Measure(d, docs)
	if err != nil {
		t.Fatalf("Measure: %v", err)
	}
	if sizes.JSON != int64(jsonBytes) || sizes.Zstd != int64(payload[warmcache.CodecZstd]) || sizes.Dict != int64(payload[warmcache.CodecZstdDict]) {
		t.Errorf("Measure = %+v, want the stored sizes json %d, zstd %d, dict %d",
			sizes, jsonBytes, payload[warmcache.CodecZstd], payload[warmcache.CodecZstdDict])
	}
}

// TestAddDictionaryRejectsGarbage checks that the Cache refuses bytes that
// are not a whole zstd dictionary.
func TestAddDictionaryRejectsGarbage(t *testing.T) {
	a1, err := zdict.Train(widgetDocs(300, 1), nil, zdict.Options{})
	if err != nil {
		t.Fatalf("Train: %v", err)
	}
	c, err := rediscache.New(rediscache.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	broken := bytes.Clone(a1[:64])
	if _, err := c.AddDictionary("w", broken); err == nil {
		t.Error("AddDictionary(truncated) = nil error")
	}
}
