package warmcache

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
)

// DefaultMaxLineBytes bounds one line of a load source when the reader is
// given no bound: a 1 MiB value and its key.
const DefaultMaxLineBytes = 1<<20 + 4<<10

// NewNDJSONReader returns a RecordReader of newline-delimited JSON: one
// object per line, {"key": <string or integer>, "value": <any JSON>}. Blank
// lines are skipped. A line longer than maxLine bytes (zero means
// DefaultMaxLineBytes), an undecodable line, or a line with other fields is
// a *LineError, and reading goes on at the next line. The reader reads r as
// it goes and holds one line at a time. It is not safe for concurrent use.
func NewNDJSONReader(r io.Reader, maxLine int) RecordReader {
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

func (n *ndjsonReader) Read() (LoadRecord, error) {
	for {
		line, tooLong, err := n.next()
		if err != nil {
			return LoadRecord{}, err
		}
		if tooLong {
			return LoadRecord{}, &LineError{Line: n.line, Err: fmt.Errorf("%w: line is longer than %d bytes", ErrTooLarge, n.max)}
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var doc ndjsonLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil || dec.More() {
			return LoadRecord{}, &LineError{Line: n.line, Err: fmt.Errorf(`%w: want {"key":...,"value":...}`, ErrInvalidValue)}
		}
		if doc.Value == nil {
			return LoadRecord{}, &LineError{Line: n.line, Err: fmt.Errorf("%w: no value", ErrInvalidValue)}
		}
		key, err := keyFromJSON(doc.Key)
		if err != nil {
			return LoadRecord{}, &LineError{Line: n.line, Err: err}
		}
		return LoadRecord{Line: n.line, Key: key, Value: slices.Clone([]byte(doc.Value))}, nil
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
		return "", fmt.Errorf("%w: no key", ErrInvalidKey)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%w: key is not a JSON string or integer", ErrInvalidKey)
		}
		return s, nil
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
		return "", fmt.Errorf("%w: key is not a JSON string or integer", ErrInvalidKey)
	}
	return string(raw), nil
}

// NewCSVReader returns a RecordReader of CSV with a header line. The column
// named keyColumn (or "key") holds the key. If a column is named "value", it
// holds the JSON value and no other column may be present; otherwise every
// other column becomes a field of a JSON object, as a JSON string (the
// columns layout converts strings to its column types), and an empty cell
// leaves its field out. A record with the wrong number of fields, or an
// unparsable one, is a *LineError. It is not safe for concurrent use.
func NewCSVReader(r io.Reader, keyColumn string) RecordReader {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	return &csvReader{r: cr, keyColumn: keyColumn}
}

type csvReader struct {
	r         *csv.Reader
	keyColumn string
	header    []string
	keyAt     int
	valueAt   int
}

func (c *csvReader) Read() (LoadRecord, error) {
	if c.header == nil {
		if err := c.readHeader(); err != nil {
			return LoadRecord{}, err
		}
	}
	rec, err := c.r.Read()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return LoadRecord{}, &LineError{Line: int64(pe.Line), Err: fmt.Errorf("%w: %v", ErrInvalidValue, pe.Err)}
		}
		return LoadRecord{}, err
	}
	line, _ := c.r.FieldPos(0)
	out := LoadRecord{Line: int64(line), Key: rec[c.keyAt]}
	if c.valueAt >= 0 {
		out.Value = []byte(rec[c.valueAt])
		return out, nil
	}
	var b bytes.Buffer
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
		name, _ := json.Marshal(name)
		cell, _ := json.Marshal(rec[i])
		b.Write(name)
		b.WriteByte(':')
		b.Write(cell)
	}
	b.WriteByte('}')
	out.Value = b.Bytes()
	return out, nil
}

func (c *csvReader) readHeader() error {
	h, err := c.r.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the CSV has no header line", ErrInvalidValue)
	}
	if err != nil {
		return fmt.Errorf("%w: CSV header: %v", ErrInvalidValue, err)
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
		return fmt.Errorf("%w: the CSV header has no %q or \"key\" column", ErrInvalidValue, c.keyColumn)
	}
	if c.valueAt >= 0 && len(c.header) != 2 {
		return fmt.Errorf("%w: a CSV with a \"value\" column has only the key and value columns", ErrInvalidValue)
	}
	return nil
}
