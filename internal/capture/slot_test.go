package capture

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
)

// slotState is what the server's catalog says of the slot.
type slotState struct {
	found, active bool
	walStatus     string
}

// fakeServer is a PostgreSQL server's replication slot, as the sessions
// that dial it see it. Each dial is a session whose stream is the next of
// streams (an empty one once they run out); the slot's state is the next
// of states at each read (the last one again once they run out). Its
// errors, when set, are the results of the calls of their names.
type fakeServer struct {
	mu       sync.Mutex
	states   []slotState
	streams  [][]step
	errs     map[string]error
	calls    []string // the calls in order, with "dial" and "close"
	sessions []*fakeSession
}

func (s *fakeServer) call(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	return s.errs[name]
}

func (s *fakeServer) called(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c == name {
			n++
		}
	}
	return n
}

func (s *fakeServer) dial(context.Context) (slotConn, error) {
	if err := s.call("dial"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var steps []step
	if len(s.streams) > 0 {
		steps, s.streams = s.streams[0], s.streams[1:]
	}
	sess := &fakeSession{fakeSource: &fakeSource{steps: steps}, server: s}
	s.sessions = append(s.sessions, sess)
	return sess, nil
}

// fakeSession is one session on a fakeServer.
type fakeSession struct {
	*fakeSource
	server *fakeServer
}

var _ slotConn = (*fakeSession)(nil)

func (s *fakeSession) slotState(context.Context) (found, active bool, walStatus string, err error) {
	if err := s.server.call("slotState"); err != nil {
		return false, false, "", err
	}
	s.server.mu.Lock()
	defer s.server.mu.Unlock()
	st := s.server.states[0]
	if len(s.server.states) > 1 {
		s.server.states = s.server.states[1:]
	}
	return st.found, st.active, st.walStatus, nil
}

func (s *fakeSession) dropLost(context.Context) error    { return s.server.call("dropLost") }
func (s *fakeSession) createSlot(context.Context) error  { return s.server.call("createSlot") }
func (s *fakeSession) dropCreated(context.Context) error { return s.server.call("dropCreated") }
func (s *fakeSession) startReplication(context.Context) error {
	return s.server.call("startReplication")
}
func (s *fakeSession) close(context.Context) { _ = s.server.call("close") }

// ensureSlot creates a slot that is missing or lost, and then bumps every
// namespace: what was written before was not captured.
func TestCaptureEnsuresTheSlot(t *testing.T) {
	errDown := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		state slotState
		// states, when set, are the slot's states at each read instead.
		states []slotState
		errs   map[string]error
		// calls are the server calls after slotState; reset is the
		// reason counted, empty for none.
		calls   []string
		reset   string
		bumped  bool
		wantErr func(error) bool
	}{
		{name: "missing", state: slotState{}, calls: []string{"createSlot"}, reset: "created", bumped: true},
		{name: "lost", state: slotState{found: true, walStatus: "lost"}, calls: []string{"dropLost", "createSlot"}, reset: "lost", bumped: true},
		{name: "there", state: slotState{found: true, walStatus: "reserved"}},
		{name: "there and null wal_status", state: slotState{found: true}},
		{name: "held by another instance", state: slotState{found: true, active: true, walStatus: "reserved"},
			wantErr: isErr(errStandby)},
		{name: "catalog unreadable", errs: map[string]error{"slotState": errDown}, wantErr: isErr(errDown)},
		{name: "lost and not dropped", state: slotState{found: true, walStatus: "lost"}, errs: map[string]error{"dropLost": errDown},
			calls: []string{"dropLost"}, wantErr: isErr(errDown)},
		{name: "created by another instance meanwhile", states: []slotState{{}, {found: true, active: true}},
			errs:  map[string]error{"createSlot": &pgconn.PgError{Code: pgerrcode.DuplicateObject}},
			calls: []string{"createSlot", "slotState"}, wantErr: isErr(errStandby)},
		{name: "the name taken in another database", states: []slotState{{}, {}},
			errs:  map[string]error{"createSlot": &pgconn.PgError{Code: pgerrcode.DuplicateObject}},
			calls: []string{"createSlot", "slotState"}, wantErr: isErr(errSlotElsewhere)},
		{name: "not created", state: slotState{}, errs: map[string]error{"createSlot": errDown},
			calls: []string{"createSlot"}, wantErr: isErr(errDown)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCaptureTest(t)
			states := tc.states
			if states == nil {
				states = []slotState{tc.state}
			}
			server := &fakeServer{states: states, errs: tc.errs}
			ct.c.dial = server.dial
			err := ct.c.prepare(context.Background())
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("prepare = %v", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("prepare = %v", err)
			}
			want := slices.Concat([]string{"dial", "slotState"}, tc.calls, []string{"close"})
			if !slices.Equal(server.calls, want) {
				t.Errorf("server calls %v, want %v", server.calls, want)
			}
			for _, reason := range []string{"created", "lost"} {
				want := 0.0
				if reason == tc.reset {
					want = 1
				}
				if got, _ := promregtest.Lookup(t, ct.reg, "warmcache_change_capture_slot_resets_total", "reason", reason); got != want {
					t.Errorf("slot_resets_total{%s} = %v, want %v", reason, got, want)
				}
			}
			wantGen := int64(0)
			if tc.bumped {
				wantGen = 1
			}
			if ct.hot.gen("items") != wantGen || ct.hot.gen("users") != wantGen {
				t.Errorf("generations items %d, users %d; want %d", ct.hot.gen("items"), ct.hot.gen("users"), wantGen)
			}
		})
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// A slot created while the generations cannot be bumped is dropped
// again, so that the next attempt creates it and bumps them.
func TestCaptureDropsASlotItCannotBumpFor(t *testing.T) {
	ct := newCaptureTest(t)
	errDown := errors.New("connection refused")
	ct.genStore.setErr(errDown)
	server := &fakeServer{states: []slotState{{}}}
	ct.c.dial = server.dial
	if err := ct.c.prepare(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("prepare = %v, want the bump's error", err)
	}
	if want := []string{"dial", "slotState", "createSlot", "dropCreated", "close"}; !slices.Equal(server.calls, want) {
		t.Errorf("server calls %v, want %v", server.calls, want)
	}
	if ct.hot.gen("items") != 0 {
		t.Errorf("items moved to %d by a bump that failed", ct.hot.gen("items"))
	}
}

func TestCaptureSession(t *testing.T) {
	t.Run("streams once it holds the slot", func(t *testing.T) {
		ct := newCaptureTest(t)
		server := &fakeServer{states: []slotState{{found: true}},
			streams: [][]step{script(relations(), txn(0x100, insert(relItems, text("1"), text(`1`), text("1"))))}}
		ct.c.dial = server.dial
		if err := ct.c.session(context.Background()); !errors.Is(err, errStreamEnd) {
			t.Fatalf("session = %v, want the end of the stream", err)
		}
		appliedOnce(t, ct.apply, "items", present(ct.items, "1", `1`, 1))
		if want := []string{"dial", "slotState", "startReplication", "close"}; !slices.Equal(server.calls, want) {
			t.Errorf("server calls %v, want %v", server.calls, want)
		}
	})
	t.Run("another instance streams the slot", func(t *testing.T) {
		ct := newCaptureTest(t)
		server := &fakeServer{states: []slotState{{found: true}},
			errs: map[string]error{"startReplication": &pgconn.PgError{Code: pgerrcode.ObjectInUse}}}
		ct.c.dial = server.dial
		if err := ct.c.session(context.Background()); !errors.Is(err, errStandby) {
			t.Errorf("session = %v, want errStandby", err)
		}
		if server.called("close") != 1 {
			t.Errorf("the session is not closed")
		}
	})
	t.Run("replication does not start", func(t *testing.T) {
		ct := newCaptureTest(t)
		errDown := errors.New("connection reset")
		server := &fakeServer{states: []slotState{{found: true}}, errs: map[string]error{"startReplication": errDown}}
		ct.c.dial = server.dial
		if err := ct.c.session(context.Background()); !errors.Is(err, errDown) || errors.Is(err, errStandby) {
			t.Errorf("session = %v, want the error", err)
		}
	})
	t.Run("no connection", func(t *testing.T) {
		ct := newCaptureTest(t)
		errDown := errors.New("connection refused")
		server := &fakeServer{errs: map[string]error{"dial": errDown}}
		ct.c.dial = server.dial
		if err := ct.c.session(context.Background()); !errors.Is(err, errDown) {
			t.Errorf("session = %v, want the error", err)
		}
	})
}

// run holds the slot, or stands by while another instance holds it, and
// takes it up again every retry interval until its context ends.
func TestCaptureRun(t *testing.T) {
	ct := newCaptureTest(t)
	server := &fakeServer{
		errs: map[string]error{},
		states: []slotState{
			{found: true, active: true}, // session 2
			{found: true, active: true}, // session 3
			{found: true},               // session 4
		},
		streams: [][]step{
			nil, nil,
			script(relations(), txn(0x100, insert(relItems, text("1"), text(`1`), text("1")))),
		},
	}
	server.errs["dial"] = errors.New("connection refused")
	ct.c.dial = server.dial
	var modes []string
	ct.c.setMode = func(mode string) {
		modes = append(modes, mode)
		ct.m.setMode(mode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	after := ct.c.after
	ct.c.after = func(d time.Duration) <-chan time.Time {
		switch len(ct.waits) {
		case 0:
			server.mu.Lock()
			delete(server.errs, "dial")
			server.mu.Unlock()
		case 3:
			cancel()
			return nil // never ready: run returns through ctx
		}
		return after(d)
	}
	ct.c.run(ctx)

	if want := []time.Duration{time.Second, time.Second, time.Second}; !slices.Equal(ct.waits, want) {
		t.Errorf("waited %v, want the retry interval each time", ct.waits)
	}
	if want := []string{ModeStandby, ModeStandby, ModeStandby, ModeCapture, ModeStandby}; !slices.Equal(modes, want) {
		t.Errorf("modes %v, want %v", modes, want)
	}
	appliedOnce(t, ct.apply, "items", present(ct.items, "1", `1`, 1))
	log := ct.log.String()
	if n := strings.Count(log, "standing by"); n != 1 {
		t.Errorf("standing by logged %d times, want once", n)
	}
	if n := strings.Count(log, "change capture interrupted"); n != 2 {
		t.Errorf("interruptions logged %d times, want 2: the failed dial and the end of the stream", n)
	}
	if server.called("close") != 3 {
		t.Errorf("%d sessions closed, want 3", server.called("close"))
	}
}
