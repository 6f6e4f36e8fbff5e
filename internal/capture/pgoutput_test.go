package capture

// This file writes the replication protocol's messages as PostgreSQL
// sends them (pgoutput, protocol version 1, inside CopyData), for a fake
// slot to stream.

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"
)

// column is one column of a tuple: text, null or an unchanged TOASTed
// value.
type column struct {
	kind byte
	data string
}

func text(s string) column { return column{kind: pglogrepl.TupleDataTypeText, data: s} }

var (
	null  = column{kind: pglogrepl.TupleDataTypeNull}
	toast = column{kind: pglogrepl.TupleDataTypeToast}
)

type wire []byte

func (w wire) u8(v byte) wire    { return append(w, v) }
func (w wire) u16(v uint16) wire { return binary.BigEndian.AppendUint16(w, v) }
func (w wire) u32(v uint32) wire { return binary.BigEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire { return binary.BigEndian.AppendUint64(w, v) }
func (w wire) str(s string) wire { return append(append(w, s...), 0) }

func (w wire) time(t time.Time) wire {
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	return w.u64(uint64(t.Sub(y2k).Microseconds()))
}

func (w wire) tuple(cols []column) wire {
	w = w.u16(uint16(len(cols)))
	for _, c := range cols {
		w = w.u8(c.kind)
		if c.kind == pglogrepl.TupleDataTypeText {
			w = append(w.u32(uint32(len(c.data))), c.data...)
		}
	}
	return w
}

// relation describes table schema.name as relation id, with text columns.
func relation(id uint32, schema, name string, columns ...string) []byte {
	w := wire{'R'}.u32(id).str(schema).str(name).u8('d').u16(uint16(len(columns)))
	for _, c := range columns {
		w = w.u8(0).str(c).u32(25).u32(0xffffffff)
	}
	return w
}

func begin(final pglogrepl.LSN, commit time.Time, xid uint32) []byte {
	return wire{'B'}.u64(uint64(final)).time(commit).u32(xid)
}

func commit(end pglogrepl.LSN, at time.Time) []byte {
	return wire{'C'}.u8(0).u64(uint64(end - 1)).u64(uint64(end)).time(at)
}

func insert(rel uint32, cols ...column) []byte {
	return wire{'I'}.u32(rel).u8('N').tuple(cols)
}

func update(rel uint32, cols ...column) []byte {
	return wire{'U'}.u32(rel).u8('N').tuple(cols)
}

func deleteRow(rel uint32, cols ...column) []byte {
	return wire{'D'}.u32(rel).u8('K').tuple(cols)
}

func truncate(rel uint32) []byte {
	return wire{'T'}.u32(1).u8(0).u32(rel)
}

// xlog wraps a pgoutput message as the server streams it.
func xlog(at pglogrepl.LSN, msg []byte) *pgproto3.CopyData {
	w := wire{pglogrepl.XLogDataByteID}.u64(uint64(at)).u64(uint64(at)).time(time.Now())
	return &pgproto3.CopyData{Data: append(w, msg...)}
}

// keepalive is the server's keepalive at its WAL end; reply asks for a
// status update at once.
func keepalive(walEnd pglogrepl.LSN, reply bool) *pgproto3.CopyData {
	r := byte(0)
	if reply {
		r = 1
	}
	return &pgproto3.CopyData{Data: wire{pglogrepl.PrimaryKeepaliveMessageByteID}.u64(uint64(walEnd)).time(time.Now()).u8(r)}
}

// step is one receive of the stream: a message, an error, or first an
// action (such as moving the clock).
type step struct {
	msg pgproto3.BackendMessage
	err error
	do  func()
}

func msgs(ms ...pgproto3.BackendMessage) []step {
	steps := make([]step, len(ms))
	for i, m := range ms {
		steps[i] = step{msg: m}
	}
	return steps
}

// errStreamEnd ends a fake source's stream.
var errStreamEnd = errors.New("the test's stream ended")

// fakeSource is one session on a replication slot: it streams its steps,
// then errStreamEnd, and records what the capture confirms and asks.
type fakeSource struct {
	mu    sync.Mutex
	steps []step
	// confirms are the positions confirmed, in order.
	confirms []pglogrepl.LSN
	// confirmErr, when set, is the result of each confirm.
	confirmErr func(pos pglogrepl.LSN) error
	wal        float64
	walErr     error
	walCalls   int
	prunes     []time.Duration
	pruneErr   error
}

var _ source = (*fakeSource)(nil)

func (s *fakeSource) receive(ctx context.Context) (pgproto3.BackendMessage, error) {
	s.mu.Lock()
	if len(s.steps) == 0 {
		s.mu.Unlock()
		return nil, errStreamEnd
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	s.mu.Unlock()
	if st.do != nil {
		st.do()
	}
	if st.err != nil {
		return nil, st.err
	}
	return st.msg, nil
}

func (s *fakeSource) confirm(_ context.Context, pos pglogrepl.LSN) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.confirmErr != nil {
		if err := s.confirmErr(pos); err != nil {
			return err
		}
	}
	s.confirms = append(s.confirms, pos)
	return nil
}

func (s *fakeSource) walRetained(context.Context) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.walCalls++
	return s.wal, s.walErr
}

func (s *fakeSource) pruneDeletes(_ context.Context, age time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prunes = append(s.prunes, age)
	return s.pruneErr
}

// lastConfirmed returns the last position confirmed, 0 when none.
func (s *fakeSource) lastConfirmed() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.confirms) == 0 {
		return 0
	}
	return s.confirms[len(s.confirms)-1]
}
