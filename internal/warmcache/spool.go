package warmcache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// spooled is a load's validated rows, written to an unlinked temporary
// file while the source is read, and read back as LoadRows once it ended
// well. Each row is its line, its key and its value, as uvarint-prefixed
// fields.
type spooled struct {
	f   *os.File
	r   *bufio.Reader
	ns  *Namespace
	row LoadRow
	err error
	buf []byte
}

// spool reads rows to their end into a temporary file in SpoolDir. It
// returns the error of the rows (a *LoadError, a read error, ErrTooLarge)
// without writing to the warehouse; a failure of the file is an error
// that wraps ErrUnavailable.
func (s *Service) spool(ns *Namespace, rows *checkedRows) (*spooled, error) {
	f, err := os.CreateTemp(s.opts.SpoolDir, "warmcache-load-*")
	if err != nil {
		return nil, fmt.Errorf("%w: load spool: %w", ErrUnavailable, err)
	}
	// Unlinked at once: the file is gone when the process is, however it
	// ends.
	_ = os.Remove(f.Name())
	sp := &spooled{f: f, ns: ns}
	w := bufio.NewWriterSize(f, 64<<10)
	var hdr [2 * binary.MaxVarintLen64]byte
	for rows.Next() {
		r := rows.Row()
		n := binary.PutUvarint(hdr[:], uint64(r.Line))
		n += binary.PutUvarint(hdr[n:], uint64(len(r.Key.Text)))
		if _, err = w.Write(hdr[:n]); err == nil {
			if _, err = w.WriteString(r.Key.Text); err == nil {
				n = binary.PutUvarint(hdr[:], uint64(len(r.Value)))
				if _, err = w.Write(hdr[:n]); err == nil {
					_, err = w.Write(r.Value)
				}
			}
		}
		if err != nil {
			sp.close()
			return nil, fmt.Errorf("%w: load spool: %w", ErrUnavailable, err)
		}
	}
	if err := rows.Err(); err != nil {
		sp.close()
		return nil, err
	}
	if err := w.Flush(); err != nil {
		sp.close()
		return nil, fmt.Errorf("%w: load spool: %w", ErrUnavailable, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		sp.close()
		return nil, fmt.Errorf("%w: load spool: %w", ErrUnavailable, err)
	}
	sp.r = bufio.NewReaderSize(f, 64<<10)
	return sp, nil
}

// Next reads the next spooled row.
func (sp *spooled) Next() bool {
	if sp.err != nil {
		return false
	}
	line, err := binary.ReadUvarint(sp.r)
	if errors.Is(err, io.EOF) {
		return false
	}
	var key, value []byte
	if err == nil {
		key, err = sp.field()
	}
	if err == nil {
		key = append([]byte(nil), key...)
		value, err = sp.field()
	}
	if err != nil {
		sp.err = fmt.Errorf("%w: load spool: %w", ErrUnavailable, err)
		return false
	}
	k := Key{Text: string(key)}
	if sp.ns.KeyType == KeyBigint {
		k.Int, _ = strconv.ParseInt(k.Text, 10, 64) // validated before it was spooled
	}
	sp.row = LoadRow{Line: int64(line), Key: k, Value: append([]byte(nil), value...)}
	return true
}

// field reads one length-prefixed field into the reused buffer.
func (sp *spooled) field() ([]byte, error) {
	n, err := binary.ReadUvarint(sp.r)
	if err != nil {
		return nil, noEOF(err)
	}
	if n > uint64(1<<31) {
		return nil, errors.New("corrupt spool record")
	}
	if uint64(cap(sp.buf)) < n {
		sp.buf = make([]byte, n)
	}
	sp.buf = sp.buf[:n]
	_, err = io.ReadFull(sp.r, sp.buf)
	return sp.buf, noEOF(err)
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Row returns the current row.
func (sp *spooled) Row() LoadRow { return sp.row }

// Err reports a failure to read the spool back.
func (sp *spooled) Err() error { return sp.err }

func (sp *spooled) close() { _ = sp.f.Close() }
