// Package loadfmt reads the record formats of a bulk load, NDJSON and CSV,
// into warmcache.RecordReaders. Each reader holds one line or record at a
// time, bounded in bytes, so that a source of any size streams through it.
// Bad lines are *warmcache.LineError values, and reading goes on after
// them; a source that cannot be read further ends with an error wrapping
// warmcache.ErrInvalidValue or warmcache.ErrTooLarge.
package loadfmt

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// DefaultMaxLineBytes bounds one line of a load source when the reader is
// given no bound: a 1 MiB value and its key.
const DefaultMaxLineBytes = 1<<20 + 4<<10

// NewNDJSON returns a warmcache.RecordReader of newline-delimited JSON: one
// object per line, {"key": <string or integer>, "value": <any JSON>}. Blank
// lines are skipped. A line longer than maxLine bytes (zero means
// DefaultMaxLineBytes), an undecodable line, or a line with other fields is
// a *warmcache.LineError, and reading goes on at the next line. The reader
// reads r as it goes and holds one line at a time. It is not safe for
// concurrent use.
func NewNDJSON(r io.Reader, maxLine int) warmcache.RecordReader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	return &ndjsonReader{r: bufio.NewReaderSize(r, 64<<10), max: maxLine}
}

type ndjsonReader struct {
	r    *bufio.Reader
	max  int
	line int64
	buf  []byte
}

type ndjsonLine struct {
	Key   json.RawMessage `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (n *ndjsonReader) Read() (warmcache.LoadRecord, error) {
	for {
		line, tooLong, err := n.next()
		if err != nil {
			return warmcache.LoadRecord{}, err
		}
		if tooLong {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: n.line, Err: fmt.Errorf("%w: line is longer than %d bytes", warmcache.ErrTooLarge, n.max)}
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var doc ndjsonLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil || dec.More() {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: n.line, Err: fmt.Errorf(`%w: want {"key":...,"value":...}`, warmcache.ErrInvalidValue)}
		}
		if doc.Value == nil {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: n.line, Err: fmt.Errorf("%w: no value", warmcache.ErrInvalidValue)}
		}
		key, err := keyFromJSON(doc.Key)
		if err != nil {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: n.line, Err: err}
		}
		return warmcache.LoadRecord{Line: n.line, Key: key, Value: slices.Clone([]byte(doc.Value))}, nil
	}
}

// next returns the next line without its newline, or reports that it was
// longer than the bound (and skips it). It returns io.EOF at the end.
func (n *ndjsonReader) next() (line []byte, tooLong bool, err error) {
	n.buf = n.buf[:0]
	for {
		frag, err := n.r.ReadSlice('\n')
		if !tooLong {
			if len(n.buf)+len(frag) > n.max+1 {
				tooLong = true
				n.buf = n.buf[:0]
			} else {
				n.buf = append(n.buf, frag...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(n.buf) == 0 && !tooLong {
				return nil, false, io.EOF
			}
			n.line++
			return n.buf, tooLong, nil
		case err != nil:
			return nil, false, err
		}
		n.line++
		return bytes.TrimSuffix(n.buf, []byte("\n")), tooLong, nil
	}
}

// keyFromJSON accepts a key given as a JSON string or integer.
func keyFromJSON(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", fmt.Errorf("%w: no key", warmcache.ErrInvalidKey)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%w: key is not a JSON string or integer", warmcache.ErrInvalidKey)
		}
		return s, nil
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
		return "", fmt.Errorf("%w: key is not a JSON string or integer", warmcache.ErrInvalidKey)
	}
	return string(raw), nil
}

// NewCSV returns a warmcache.RecordReader of CSV with a header line. The
// column named keyColumn (or "key") holds the key. If a column is named
// "value", it holds the JSON value and no other column may be present (a
// cell that is not JSON is a *warmcache.LineError);
// otherwise every other column becomes a field of a JSON object, as a JSON
// string (the columns layout converts strings to its column types), and an
// empty cell leaves its field out. A record with the wrong number of
// fields, or an unparsable one, is a *warmcache.LineError. A record (the
// header too) longer than maxRecord bytes (zero means DefaultMaxLineBytes)
// ends the reading with an error that wraps warmcache.ErrTooLarge and names
// the bound: the reader holds one record at a time, never more than about
// maxRecord bytes of it. It is not safe for concurrent use.
func NewCSV(r io.Reader, keyColumn string, maxRecord int) warmcache.RecordReader {
	if maxRecord <= 0 {
		maxRecord = DefaultMaxLineBytes
	}
	bounded := &recordBound{r: r, max: int64(maxRecord) + csvReadAhead}
	cr := csv.NewReader(bounded)
	cr.ReuseRecord = true
	return &csvReader{r: cr, bound: bounded, maxRecord: maxRecord, keyColumn: keyColumn}
}

// csvReadAhead is how far encoding/csv's buffered reader may read past the
// record it parses (its bufio buffer).
const csvReadAhead = 4096

// errRecordTooLong stops a CSV record over its bound.
var errRecordTooLong = errors.New("record too long")

// recordBound counts the bytes read since the last record began and fails
// once they pass max, so that encoding/csv, which gathers a whole record
// (quoted fields span lines), stops growing its buffers.
type recordBound struct {
	r   io.Reader
	max int64
	n   int64
}

func (b *recordBound) Read(p []byte) (int, error) {
	if b.n >= b.max {
		return 0, errRecordTooLong
	}
	if int64(len(p)) > b.max-b.n {
		p = p[:b.max-b.n]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

type csvReader struct {
	r         *csv.Reader
	bound     *recordBound
	maxRecord int
	keyColumn string
	header    []string
	keyAt     int
	valueAt   int
}

func (c *csvReader) Read() (warmcache.LoadRecord, error) {
	if c.header == nil {
		if err := c.readHeader(); err != nil {
			return warmcache.LoadRecord{}, err
		}
	}
	rec, err := c.r.Read()
	c.bound.n = 0 // a new record begins; what was read ahead counts within csvReadAhead
	if errors.Is(err, errRecordTooLong) {
		return warmcache.LoadRecord{}, fmt.Errorf("%w: a CSV record is longer than %d bytes", warmcache.ErrTooLarge, c.maxRecord)
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: int64(pe.Line), Err: fmt.Errorf("%w: %v", warmcache.ErrInvalidValue, pe.Err)}
		}
		return warmcache.LoadRecord{}, err
	}
	if recordBytes(rec) > c.maxRecord {
		return warmcache.LoadRecord{}, fmt.Errorf("%w: a CSV record is longer than %d bytes", warmcache.ErrTooLarge, c.maxRecord)
	}
	line, _ := c.r.FieldPos(0)
	out := warmcache.LoadRecord{Line: int64(line), Key: rec[c.keyAt]}
	if c.valueAt >= 0 {
		if !json.Valid([]byte(rec[c.valueAt])) {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: int64(line), Err: fmt.Errorf("%w: the value cell is not JSON", warmcache.ErrInvalidValue)}
		}
		out.Value = []byte(rec[c.valueAt])
		return out, nil
	}
	// The object names every non-empty cell by its column, so it is larger
	// than the record; it is bounded too, at maxBuiltValue(maxRecord).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a cell's & < > stay one byte each
	b.WriteByte('{')
	first := true
	for i, name := range c.header {
		if i == c.keyAt || rec[i] == "" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeJSONString(enc, &b, name)
		b.WriteByte(':')
		writeJSONString(enc, &b, rec[i])
		if b.Len() > maxBuiltValue(c.maxRecord) {
			return warmcache.LoadRecord{}, &warmcache.LineError{Line: int64(line), Err: fmt.Errorf("%w: the JSON object of a CSV record is longer than %d bytes", warmcache.ErrTooLarge, maxBuiltValue(c.maxRecord))}
		}
	}
	b.WriteByte('}')
	out.Value = b.Bytes()
	return out, nil
}

// maxBuiltValue bounds the JSON object built from one CSV record of at most
// maxRecord bytes: room for the column names and escapes beside the cells.
func maxBuiltValue(maxRecord int) int { return 4 * maxRecord }

// recordBytes is the size of a parsed record: its cells and the commas
// between them.
func recordBytes(rec []string) int {
	n := len(rec) - 1
	for _, f := range rec {
		n += len(f)
	}
	return n
}

// writeJSONString appends s to b as a JSON string through enc, which writes
// to b and ends what it encodes with a newline.
func writeJSONString(enc *json.Encoder, b *bytes.Buffer, s string) {
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

func (c *csvReader) readHeader() error {
	h, err := c.r.Read()
	c.bound.n = 0
	if errors.Is(err, errRecordTooLong) {
		return fmt.Errorf("%w: the CSV header is longer than %d bytes", warmcache.ErrTooLarge, c.maxRecord)
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the CSV has no header line", warmcache.ErrInvalidValue)
	}
	if err != nil {
		return fmt.Errorf("%w: CSV header: %v", warmcache.ErrInvalidValue, err)
	}
	c.header = slices.Clone(h)
	c.keyAt, c.valueAt = -1, -1
	for i, name := range c.header {
		switch {
		case name == c.keyColumn || (name == "key" && c.keyAt < 0):
			c.keyAt = i
		case name == "value":
			c.valueAt = i
		}
	}
	if c.keyAt < 0 {
		return fmt.Errorf("%w: the CSV header has no %q or \"key\" column", warmcache.ErrInvalidValue, c.keyColumn)
	}
	if c.valueAt >= 0 && len(c.header) != 2 {
		return fmt.Errorf("%w: a CSV with a \"value\" column has only the key and value columns", warmcache.ErrInvalidValue)
	}
	return nil
}
