package warmcache_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func blobs() *warmcache.Namespace {
	return &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "value", VersionColumn: "version", Writable: true}
}

// noRecords is a load source that ends at once.
type noRecords struct{}

func (noRecords) Read() (warmcache.LoadRecord, error) { return warmcache.LoadRecord{}, io.EOF }

// TestBytesLayout round-trips any bytes through Transact, Get and MGet of a
// bytes namespace, from the warehouse and from the hot tier, bounds them as
// JSON values are bounded, and refuses what needs JSON; a JSON namespace
// still refuses what is not JSON.
func TestBytesLayout(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	svc := newService(t, hot, warm, widgets(), blobs())
	ctx := context.Background()
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	values := map[string][]byte{"every-byte": every, "empty": {}, "not-json": []byte("{")}
	for key, v := range values {
		items, err := svc.Transact(ctx, "blobs", []warmcache.Op{{Key: key, Value: v}})
		if err != nil || !bytes.Equal(items[0].Entry.Value, v) {
			t.Fatalf("Transact %s = %v, %v", key, items, err)
		}
		hot.Forget()
		for _, want := range []warmcache.Source{warmcache.SourceWarm, warmcache.SourceHot} {
			it, err := svc.Get(ctx, "blobs", key)
			if err != nil || !bytes.Equal(it.Entry.Value, v) || it.Source != want {
				t.Fatalf("Get %s = %x from %s, %v; want %x from %s", key, it.Entry.Value, it.Source, err, v, want)
			}
		}
	}
	items, err := svc.MGet(ctx, "blobs", []string{"every-byte", "empty", "absent"})
	if err != nil || !bytes.Equal(items[0].Entry.Value, every) || !items[1].Entry.Found || len(items[1].Entry.Value) != 0 || items[2].Entry.Found {
		t.Fatalf("MGet = %+v, %v", items, err)
	}
	if _, err := svc.Put(ctx, "blobs", "big", make([]byte, 1<<20+1), nil); !errors.Is(err, warmcache.ErrTooLarge) {
		t.Fatalf("Put of 1 MiB + 1 = %v, want ErrTooLarge", err)
	}
	if _, err := svc.Query(ctx, "blobs", []byte(`{"a":1}`), 10, ""); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Query of a bytes namespace = %v, want ErrInvalidValue", err)
	}
	if _, err := svc.Load(ctx, "blobs", noRecords{}); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Load into a bytes namespace = %v, want ErrInvalidValue", err)
	}
	if _, err := svc.Put(ctx, "widgets", "1", []byte{0x00, 0xff}, nil); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Put of bytes into a JSON namespace = %v, want ErrInvalidValue", err)
	}
}

// TestItemsCarryTheMediaType: every answer of the core carries its
// namespace's media type and whether its values are opaque, so that a
// transport need not ask for the namespace again.
func TestItemsCarryTheMediaType(t *testing.T) {
	png := blobs()
	png.ContentType = "image/png"
	svc := newService(t, memtier.NewHot(nil), memtier.NewWarm(), widgets(), png)
	ctx := context.Background()
	for _, tt := range []struct {
		ns, key   string
		absent    string
		value     []byte
		mediaType string
		opaque    bool
	}{
		{"blobs", "a", "b", []byte{0xff}, "image/png", true},
		{"widgets", "1", "2", []byte(`{"a":1}`), warmcache.ContentTypeJSON, false},
	} {
		check := func(how string, it warmcache.Item) {
			t.Helper()
			if it.MediaType != tt.mediaType || it.Opaque != tt.opaque {
				t.Errorf("%s %s: media type %q, opaque %v; want %q, %v", how, tt.ns, it.MediaType, it.Opaque, tt.mediaType, tt.opaque)
			}
		}
		items, err := svc.Transact(ctx, tt.ns, []warmcache.Op{{Key: tt.key, Value: tt.value}})
		if err != nil {
			t.Fatal(err)
		}
		check("Transact", items[0])
		it, err := svc.Get(ctx, tt.ns, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		check("Get", it)
		if it, err = svc.GetLatest(ctx, tt.ns, tt.key); err != nil {
			t.Fatal(err)
		}
		check("GetLatest", it)
		if items, err = svc.MGet(ctx, tt.ns, []string{tt.key, tt.absent}); err != nil {
			t.Fatal(err)
		}
		check("MGet", items[0])
		check("MGet of an absent key", items[1])
	}
}

func TestMediaType(t *testing.T) {
	ns := blobs()
	if got := ns.MediaType(); got != warmcache.ContentTypeBytes {
		t.Errorf("bytes MediaType() = %q, want %q", got, warmcache.ContentTypeBytes)
	}
	ns.ContentType = "image/png"
	if got := ns.MediaType(); got != "image/png" {
		t.Errorf("bytes MediaType() = %q, want image/png", got)
	}
	if got := widgets().MediaType(); got != warmcache.ContentTypeJSON {
		t.Errorf("packed MediaType() = %q, want %q", got, warmcache.ContentTypeJSON)
	}
}
