package loadfmt_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// readAll reads r to its end and returns each record as "line key value",
// or "line bad" for a bad line. Any other error fails the test.
func readAll(t *testing.T, r warmcache.RecordReader) []string {
	t.Helper()
	var got []string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return got
		}
		var le *warmcache.LineError
		if errors.As(err, &le) {
			got = append(got, strconv.FormatInt(le.Line, 10)+" bad")
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strconv.FormatInt(rec.Line, 10)+" "+rec.Key+" "+string(rec.Value))
	}
}

func TestNDJSON(t *testing.T) {
	long := `{"key":9,"value":"` + strings.Repeat("x", 200) + `"}`
	src := strings.Join([]string{
		`{"key":1,"value":{"a":1}}`,
		``,
		`{"key":"k2","value":[1,2]}`,
		`{"key":3}`,
		`{"key":4,"value":1,"extra":true}`,
		`{"key":4.5,"value":1}`,
		long,
		`{"key":8,"value":null}`,
	}, "\n")
	got := readAll(t, loadfmt.NewNDJSON(strings.NewReader(src), 100))
	want := []string{`1 1 {"a":1}`, `3 k2 [1,2]`, `4 bad`, `5 bad`, `6 bad`, `7 bad`, `8 8 null`}
	if !slices.Equal(got, want) {
		t.Fatalf("records = %q, want %q", got, want)
	}
}

func TestCSV(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // "line key value" or "line bad"
	}{
		{"value column", "key,value\n1,\"{\"\"a\"\": 1}\"\n2,[]\n", []string{`2 1 {"a": 1}`, `3 2 []`}},
		{"field columns", "id,name,age\n7,Ann,41\n8,Bo,\n", []string{`2 7 {"name":"Ann","age":"41"}`, `3 8 {"name":"Bo"}`}},
		{"wrong field count", "key,value\n1,{}\n2\n3,{}\n", []string{`2 1 {}`, `3 bad`, `4 3 {}`}},
		{"value not JSON", "\nid,value\n,\n5,{x}\n6,7\n", []string{`3 bad`, `4 bad`, `5 6 7`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAll(t, loadfmt.NewCSV(strings.NewReader(tt.src), "id", 0))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("records = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := loadfmt.NewCSV(strings.NewReader("a,b\n1,2\n"), "id", 0).Read(); !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Read without a key column = %v, want ErrInvalidValue", err)
	}
}

// FuzzCSVReader feeds arbitrary CSV to the load reader: it never panics,
// ends (every call makes progress or ends), every record it yields has a
// value that is valid JSON, and a record over the bound ends the reading
// with ErrTooLarge rather than being held. Seeds: testdata/fuzz/FuzzCSVReader.
func FuzzCSVReader(f *testing.F) {
	for _, s := range []string{"id,value\n1,{}\n", "id,name\n1,\"a\"\"b\"\n2,\n", "id,name\n1,\"unterminated\n",
		"key,a,b\n1,2\n", "x\n", "", "id,value\n1,\"" + strings.Repeat("y", 300) + "\"\n"} {
		f.Add([]byte(s))
	}
	const maxRecord = 128
	f.Fuzz(func(t *testing.T, src []byte) {
		r := loadfmt.NewCSV(bytes.NewReader(src), "id", maxRecord)
		for range len(src) + 2 {
			rec, err := r.Read()
			var le *warmcache.LineError
			switch {
			case errors.Is(err, io.EOF):
				return
			case errors.As(err, &le):
				continue
			case err != nil:
				if !errors.Is(err, warmcache.ErrInvalidValue) && !errors.Is(err, warmcache.ErrTooLarge) {
					t.Fatalf("CSV %q: error %v is neither a bad line nor a client error", src, err)
				}
				return
			}
			if len(rec.Key)+len(rec.Value) > 4*maxRecord+csvSlack {
				t.Fatalf("CSV %q: a record of %d bytes passed the bound of %d", src, len(rec.Key)+len(rec.Value), maxRecord)
			}
			if !json.Valid(rec.Value) {
				t.Fatalf("CSV %q: value %q is not JSON", src, rec.Value)
			}
		}
		t.Fatalf("CSV of %d bytes yielded more records than it has bytes", len(src))
	})
}

// csvSlack is what encoding/csv may read ahead of the record it parses.
const csvSlack = 4096
