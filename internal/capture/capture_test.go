package capture

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The relations of the tests' stream.
const (
	relItems   = 1 // public.items: key, value, version
	relUsers   = 2 // crm.users: id, name, rev
	relDeletes = 3 // public.warmcache_deletes: namespace, key, version
	relGens    = 4 // public.warmcache_generations: namespace, generation
	relOther   = 5 // other.users: id, name, rev (not a namespace's table)
)

// relations are the relation messages a session starts with.
func relations() []step {
	return msgs(
		xlog(1, relation(relItems, "public", "items", "key", "value", "version")),
		xlog(1, relation(relUsers, "crm", "users", "id", "name", "rev")),
		xlog(1, relation(relDeletes, "public", "warmcache_deletes", "namespace", "key", "version", "deleted_at")),
		xlog(1, relation(relGens, "public", "warmcache_generations", "namespace", "generation")),
		xlog(1, relation(relOther, "other", "users", "id", "name", "rev")),
	)
}

// txn is one committed transaction that ends at end, with its row
// messages.
func txn(end pglogrepl.LSN, rows ...[]byte) []step {
	at := time.Now()
	steps := []step{{msg: xlog(end-100, begin(end-1, at, uint32(end)))}}
	for _, r := range rows {
		steps = append(steps, step{msg: xlog(end-50, r)})
	}
	return append(steps, step{msg: xlog(end-1, commit(end, at))})
}

func script(parts ...[]step) []step { return slices.Concat(parts...) }

// captureTest is a capture of items and users over fakes.
type captureTest struct {
	items, users *warmcache.Namespace
	c            *capture
	reg          *prometheus.Registry
	m            *metrics
	apply        *fakeApplier
	hot          *hotGenerations
	genStore     *fakeGenerationStore
	clock        *memtier.Clock
	waits        []time.Duration // the waits between attempts to apply
	log          *syncBuffer
}

func newCaptureTest(t *testing.T) *captureTest {
	t.Helper()
	ct := &captureTest{apply: &fakeApplier{}, hot: &hotGenerations{}, genStore: &fakeGenerationStore{}, clock: memtier.NewClockAt(time.Now()), log: &syncBuffer{}}
	ct.items, ct.users = testNamespaces()
	ct.m, ct.reg = testMetrics(t)
	namespaces := []*warmcache.Namespace{ct.items, ct.users}
	gens, err := NewGenerations(ct.genStore, namespaces, ct.hot.move, ct.hot.dropped, ct.reg, testLog(ct.log))
	if err != nil {
		t.Fatal(err)
	}
	ct.c = newCapture("", "warmcache", time.Second, time.Second, namespaces, ct.apply, gens, ct.m, ct.m.setMode, testLog(ct.log))
	ct.c.now = ct.clock.Now
	ct.c.dial = func(context.Context) (slotConn, error) { return nil, errors.New("no server in unit tests") }
	ct.c.after = func(d time.Duration) <-chan time.Time {
		ct.waits = append(ct.waits, d)
		ch := make(chan time.Time, 1)
		ch <- time.Time{}
		return ch
	}
	return ct
}

// stream streams src until it ends, and fails the test on any other
// error.
func (ct *captureTest) stream(t *testing.T, src *fakeSource) {
	t.Helper()
	if err := ct.c.stream(context.Background(), src); !errors.Is(err, errStreamEnd) {
		t.Fatalf("stream = %v, want the end of the test's stream", err)
	}
}

func (ct *captureTest) changes(t *testing.T, ns, kind string) float64 {
	t.Helper()
	v, _ := promregtest.Lookup(t, ct.reg, "warmcache_freshness_changes_total", "namespace", ns, "source", "capture", "kind", kind)
	return v
}

// Each row message of a namespace's table or of the delete log becomes
// the change it stands for; everything else is passed over.
func TestCaptureDecodesChanges(t *testing.T) {
	items, users := testNamespaces()
	for _, tc := range []struct {
		name string
		rows [][]byte
		ns   *warmcache.Namespace
		want []warmcache.Change
		kind string
	}{
		{name: "insert with a packed value", ns: items, kind: "upsert",
			rows: [][]byte{insert(relItems, text("42"), text(`{"a": 1}`), text("7"))},
			want: []warmcache.Change{present(items, "42", `{"a": 1}`, 7)}},
		{name: "update with a packed value", ns: items, kind: "upsert",
			rows: [][]byte{update(relItems, text("42"), text(`{"a": 2}`), text("8"))},
			want: []warmcache.Change{present(items, "42", `{"a": 2}`, 8)}},
		{name: "update that leaves a TOASTed value unchanged", ns: items, kind: "refresh",
			rows: [][]byte{update(relItems, text("42"), toast, text("9"))},
			want: []warmcache.Change{refresh(items, "42", 9)}},
		{name: "null value", ns: items, kind: "refresh",
			rows: [][]byte{insert(relItems, text("42"), null, text("9"))},
			want: []warmcache.Change{refresh(items, "42", 9)}},
		{name: "bigint key in its canonical form", ns: items, kind: "upsert",
			rows: [][]byte{insert(relItems, text("0042"), text(`1`), text("3"))},
			want: []warmcache.Change{present(items, "42", `1`, 3)}},
		{name: "columns layout is read from the warehouse", ns: users, kind: "refresh",
			rows: [][]byte{insert(relUsers, text("ann"), text("Ann"), text("11"))},
			want: []warmcache.Change{refresh(users, "ann", 11)}},
		{name: "delete log row", ns: users, kind: "delete",
			rows: [][]byte{insert(relDeletes, text("users"), text("bob"), text("12"), text("2026-01-01"))},
			want: []warmcache.Change{absent(users, "bob", 12)}},
		{name: "delete log row of another namespace", ns: users,
			rows: [][]byte{insert(relDeletes, text("orders"), text("bob"), text("12"), text("2026-01-01"))}},
		{name: "delete log row without a version", ns: users,
			rows: [][]byte{insert(relDeletes, text("users"), text("bob"), null, text("2026-01-01"))}},
		{name: "delete carries no version", ns: items,
			rows: [][]byte{deleteRow(relItems, text("42"), null, null)}},
		{name: "truncate", ns: items, rows: [][]byte{truncate(relItems)}},
		{name: "table of another schema", ns: users,
			rows: [][]byte{insert(relOther, text("ann"), text("Ann"), text("11"))}},
		{name: "unknown relation", ns: items,
			rows: [][]byte{insert(99, text("42"), text(`1`), text("3"))}},
		{name: "key that is not a key of the namespace", ns: items,
			rows: [][]byte{insert(relItems, text("forty-two"), text(`1`), text("3"))}},
		{name: "version that is not a number", ns: items,
			rows: [][]byte{insert(relItems, text("42"), text(`1`), text("v3"))}},
		{name: "null key", ns: items,
			rows: [][]byte{insert(relItems, null, text(`1`), text("3"))}},
		{name: "tuple shorter than the relation", ns: items,
			rows: [][]byte{insert(relItems, text("42"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCaptureTest(t)
			src := &fakeSource{steps: script(relations(), txn(1000, tc.rows...))}
			ct.stream(t, src)
			appliedOnce(t, ct.apply, tc.ns.Name, tc.want...)
			for _, ns := range []string{"items", "users"} {
				for _, kind := range []string{"upsert", "refresh", "delete"} {
					want := 0.0
					if ns == tc.ns.Name && kind == tc.kind {
						want = float64(len(tc.want))
					}
					if got := ct.changes(t, ns, kind); got != want {
						t.Errorf("changes_total{%s,capture,%s} = %v, want %v", ns, kind, got, want)
					}
				}
			}
		})
	}
}

// A transaction's changes of one key fold into the newest; each
// transaction is applied at its commit.
func TestCaptureKeepsTheNewestChangeOfAKey(t *testing.T) {
	ct := newCaptureTest(t)
	items := ct.items
	src := &fakeSource{steps: script(relations(),
		txn(1000,
			insert(relItems, text("1"), text(`"a"`), text("5")),
			update(relItems, text("1"), text(`"b"`), text("7")),
			insert(relDeletes, text("items"), text("1"), text("6"), null), // older than the update
			insert(relItems, text("2"), text(`"c"`), text("8")),
			insert(relDeletes, text("items"), text("2"), text("9"), null), // deleted after
		),
		txn(2000, update(relItems, text("1"), text(`"d"`), text("10"))),
	)}
	ct.stream(t, src)
	if n := ct.apply.callCount(); n != 2 {
		t.Errorf("%d Apply calls, want 2: one per transaction", n)
	}
	appliedOnce(t, ct.apply, "items", present(items, "1", `"b"`, 7), absent(items, "2", 9), present(items, "1", `"d"`, 10))
}

// The slot's position is confirmed only up to the end of a transaction
// that is applied, or, between transactions with nothing buffered, to the
// server's WAL end.
func TestCaptureConfirmsOnlyWhatIsApplied(t *testing.T) {
	ct := newCaptureTest(t)
	src := &fakeSource{steps: script(relations(),
		txn(0x100, insert(relItems, text("1"), text(`1`), text("1"))),
		msgs(keepalive(0x100, true)),
		txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))[:1],
		msgs(keepalive(0x300, true)), // inside the transaction, before its first row
		txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))[1:2],
		msgs(keepalive(0x300, true)), // inside the transaction, with a row buffered
		txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))[2:],
		msgs(keepalive(0x300, false), keepalive(0x300, true)),
	)}
	ct.stream(t, src)
	if want := []pglogrepl.LSN{0x100, 0x100, 0x100, 0x300}; !slices.Equal(src.confirms, want) {
		t.Errorf("confirmed %v, want %v", src.confirms, want)
	}
}

// The periodic status confirms the last position applied too.
func TestCaptureConfirmsEveryStatusInterval(t *testing.T) {
	ct := newCaptureTest(t)
	tick := func() { ct.clock.Advance(time.Second) }
	src := &fakeSource{steps: script(relations(),
		txn(0x100, insert(relItems, text("1"), text(`1`), text("1"))),
		[]step{{err: errIdle, do: tick}},
		txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))[:2],
		[]step{{err: errIdle, do: tick}},
		txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))[2:],
		[]step{{err: errIdle, do: tick}},
	)}
	ct.stream(t, src)
	if want := []pglogrepl.LSN{0x100, 0x100, 0x200}; !slices.Equal(src.confirms, want) {
		t.Errorf("confirmed %v, want %v", src.confirms, want)
	}
}

// A transaction larger than the buffer is applied in parts before its
// commit; its position is confirmed only at the commit.
func TestCaptureAppliesALargeTransactionInParts(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name  string
		n     int
		value string
		parts []int
	}{
		{name: "changes", n: maxBuffered + 10, value: "1", parts: []int{maxBuffered, 10}},
		{name: "bytes", n: maxBufferedBytes/len(big) + 1, value: big, parts: []int{maxBufferedBytes / len(big), 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCaptureTest(t)
			var rows [][]byte
			for i := range tc.n {
				rows = append(rows, insert(relItems, text(strconv.Itoa(i)), text(tc.value), text("1")))
			}
			large := txn(0x200, rows...)
			src := &fakeSource{steps: script(relations(),
				txn(0x100, insert(relItems, text("-1"), text(`1`), text("1"))),
				large[:len(large)-1],
				msgs(keepalive(0x300, true)),
				large[len(large)-1:],
				msgs(keepalive(0x200, true)),
			)}
			ct.stream(t, src)
			var parts []int
			for _, c := range ct.apply.calls[1:] {
				parts = append(parts, len(c.changes))
			}
			if !slices.Equal(parts, tc.parts) {
				t.Errorf("applied in parts of %v changes, want %v", parts, tc.parts)
			}
			if want := []pglogrepl.LSN{0x100, 0x200}; !slices.Equal(src.confirms, want) {
				t.Errorf("confirmed %v, want %v: nothing past the last commit while a part is applied", src.confirms, want)
			}
			if got := len(ct.apply.applied("items")); got != tc.n+1 {
				t.Errorf("%d changes applied, want %d", got, tc.n+1)
			}
		})
	}
}

// Apply is tried again until it succeeds, with a backoff up to a second;
// meanwhile the last applied position is confirmed, and a namespace that
// was applied is not applied again.
func TestCaptureRetriesAFailedApply(t *testing.T) {
	ct := newCaptureTest(t)
	items, users := ct.items, ct.users
	errHot := errors.New("hot tier down")
	failures := 0
	ct.apply.setFail(func(_ int, ns *warmcache.Namespace, _ []warmcache.Change) error {
		if ns.Name == "users" && failures < 7 {
			failures++
			return errHot
		}
		return nil
	})
	src := &fakeSource{steps: script(relations(),
		msgs(keepalive(0x100, false)),
		txn(0x200,
			insert(relItems, text("1"), text(`1`), text("3")),
			insert(relUsers, text("ann"), text("Ann"), text("4")),
		),
		msgs(keepalive(0x200, true)),
	)}
	ct.stream(t, src)
	appliedOnce(t, ct.apply, "items", present(items, "1", `1`, 3))
	appliedOnce(t, ct.apply, "users", refresh(users, "ann", 4))
	ms := time.Millisecond
	if want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}; !slices.Equal(ct.waits, want) {
		t.Errorf("waited %v between attempts, want %v", ct.waits, want)
	}
	want := slices.Repeat([]pglogrepl.LSN{0x100}, 7)
	if !slices.Equal(src.confirms, append(want, 0x200)) {
		t.Errorf("confirmed %v, want 0x100 at each retry, then 0x200", src.confirms)
	}
	if got, got2 := ct.changes(t, "items", "upsert"), ct.changes(t, "users", "refresh"); got != 1 || got2 != 1 {
		t.Errorf("changes_total counts %v upserts of items and %v refreshes of users, want 1 and 1", got, got2)
	}
	if n := strings.Count(ct.log.String(), "applying changes failed"); n != 1 {
		t.Errorf("the failure logged %d times, want once", n)
	}
}

// A stream that breaks before its transaction is applied leaves the
// slot's position at the last transaction applied; the next session
// streams from there, and nothing is lost.
func TestCaptureRestartsFromTheConfirmedPosition(t *testing.T) {
	ct := newCaptureTest(t)
	items := ct.items
	txns := []struct {
		end   pglogrepl.LSN
		steps []step
	}{
		{0x100, txn(0x100, insert(relItems, text("1"), text(`1`), text("1")))},
		{0x200, txn(0x200, insert(relItems, text("2"), text(`2`), text("2")))},
		{0x300, txn(0x300, insert(relItems, text("3"), text(`3`), text("3")))},
	}
	// session streams the slot from its confirmed position, as the server
	// does.
	var confirmed pglogrepl.LSN
	session := func() *fakeSource {
		steps := relations()
		for _, x := range txns {
			if x.end > confirmed {
				steps = append(steps, x.steps...)
				steps = append(steps, msgs(keepalive(x.end, true))...)
			}
		}
		return &fakeSource{steps: steps}
	}

	errHot := errors.New("hot tier down")
	errGone := errors.New("connection reset by peer")
	failures := 0
	ct.apply.setFail(func(_ int, _ *warmcache.Namespace, changes []warmcache.Change) error {
		if changes[0].Key.Text == "2" && failures < 10 {
			failures++
			return errHot
		}
		return nil
	})
	first := session()
	retries := 0
	first.confirmErr = func(pglogrepl.LSN) error {
		if retries++; retries > 3 {
			return errGone
		}
		return nil
	}
	if err := ct.c.stream(context.Background(), first); !errors.Is(err, errGone) {
		t.Fatalf("stream = %v, want the broken connection", err)
	}
	confirmed = first.lastConfirmed()
	if confirmed != 0x100 {
		t.Fatalf("the slot is at %v, want 0x100: the last transaction applied", confirmed)
	}

	ct.apply.setFail(nil)
	second := session()
	ct.stream(t, second)
	appliedOnce(t, ct.apply, "items", present(items, "1", `1`, 1), present(items, "2", `2`, 2), present(items, "3", `3`, 3))
	if got := second.lastConfirmed(); got != 0x300 {
		t.Errorf("the slot is at %v after the second session, want 0x300", got)
	}
}

func TestCaptureStreamErrors(t *testing.T) {
	errReset := errors.New("connection reset by peer")
	for _, tc := range []struct {
		name  string
		steps []step
		check func(t *testing.T, err error)
	}{
		{name: "server error", steps: msgs(&pgproto3.ErrorResponse{Severity: "ERROR", Code: pgerrcode.ObjectInUse, Message: "slot active"}),
			check: func(t *testing.T, err error) {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
					t.Errorf("stream = %v, want the server's error", err)
				}
			}},
		{name: "broken connection", steps: []step{{err: errReset}},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errReset) {
					t.Errorf("stream = %v, want the connection's error", err)
				}
			}},
		{name: "short keepalive", steps: msgs(&pgproto3.CopyData{Data: []byte{pglogrepl.PrimaryKeepaliveMessageByteID, 1, 2}}),
			check: wantErrorContaining("keepalive")},
		{name: "short XLogData", steps: msgs(&pgproto3.CopyData{Data: []byte{pglogrepl.XLogDataByteID, 1, 2}}),
			check: wantErrorContaining("xlogdata")},
		{name: "short pgoutput message", steps: msgs(xlog(1, []byte{'B', 1, 2})),
			check: wantErrorContaining("pgoutput")},
		{name: "idle, other messages and empty data are passed over",
			steps: script([]step{{err: errIdle}}, msgs(&pgproto3.NoticeResponse{Message: "hello"}, &pgproto3.CopyData{})),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errStreamEnd) {
					t.Errorf("stream = %v, want the end of the test's stream", err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCaptureTest(t)
			tc.check(t, ct.c.stream(context.Background(), &fakeSource{steps: tc.steps}))
		})
	}
}

func wantErrorContaining(s string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("stream = %v, want an error about %s", err, s)
		}
	}
}

// Once its context ends, the stream stops, also while it waits for the
// server or retries an Apply.
func TestCaptureStopsWithItsContext(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		ct := newCaptureTest(t)
		ctx, cancel := context.WithCancel(context.Background())
		src := &fakeSource{steps: []step{{err: errIdle, do: cancel}}}
		err := ct.c.stream(ctx, src)
		if err == nil || errors.Is(err, errStreamEnd) {
			t.Errorf("stream = %v, want it to stop at the idle receive", err)
		}
	})
	t.Run("retrying an Apply", func(t *testing.T) {
		ct := newCaptureTest(t)
		ctx, cancel := context.WithCancel(context.Background())
		ct.apply.setFail(func(n int, _ *warmcache.Namespace, _ []warmcache.Change) error {
			if n == 2 {
				cancel()
			}
			return errors.New("hot tier down")
		})
		src := &fakeSource{steps: script(relations(), txn(0x100, insert(relItems, text("1"), text(`1`), text("1"))))}
		if err := ct.c.stream(ctx, src); !errors.Is(err, context.Canceled) {
			t.Errorf("stream = %v, want context.Canceled", err)
		}
		if n := ct.apply.callCount(); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}
	})
}

// A change of a namespace's generation moves the hot tier at once, before
// the transaction's changes are applied.
func TestCaptureFollowsTheGenerations(t *testing.T) {
	ct := newCaptureTest(t)
	src := &fakeSource{steps: script(relations(),
		txn(0x100,
			insert(relItems, text("1"), text(`1`), text("1")),
			update(relGens, text("items"), text("3")),
			update(relGens, text("items"), text("2")),  // behind: ignored
			update(relGens, text("orders"), text("9")), // not ours
			update(relGens, text("users"), text("x")),  // not a number
		),
	)}
	src.steps = slices.Insert(src.steps, len(src.steps)-1, step{do: func() {
		if n := ct.apply.callCount(); n != 0 {
			t.Errorf("%d Apply calls before the commit", n)
		}
		if g := ct.hot.gen("items"); g != 3 {
			t.Errorf("items at generation %d before the commit, want 3", g)
		}
	}, msg: &pgproto3.CopyData{}})
	ct.stream(t, src)
	if !slices.Equal(ct.hot.drops(), []string{"items"}) {
		t.Errorf("near caches dropped for %v, want [items]", ct.hot.drops())
	}
	if g := ct.hot.gen("users"); g != 0 {
		t.Errorf("users at generation %d, want 0", g)
	}
	if got := promregtest.Value(t, ct.reg, "warmcache_namespace_generation", "namespace", "items"); got != 3 {
		t.Errorf("warmcache_namespace_generation{items} = %v, want 3", got)
	}
}

// The holder reports the WAL the slot retains every five seconds, prunes
// the delete log every prune interval, and goes on when either fails.
func TestCaptureReportsWALAndPrunes(t *testing.T) {
	ct := newCaptureTest(t)
	var src *fakeSource
	wait := func(d time.Duration) step { return step{err: errIdle, do: func() { ct.clock.Advance(d) }} }
	check := func(want float64, calls int, prunes int) step {
		return step{err: errIdle, do: func() {
			t.Helper()
			if got := promregtest.Value(t, ct.reg, "warmcache_change_capture_wal_retained_bytes"); got != want {
				t.Errorf("wal_retained_bytes = %v, want %v", got, want)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if src.walCalls != calls || len(src.prunes) != prunes {
				t.Errorf("WAL read %d times and pruned %d, want %d and %d", src.walCalls, len(src.prunes), calls, prunes)
			}
		}}
	}
	setWAL := func(v float64, err error) step {
		return step{err: errIdle, do: func() {
			src.mu.Lock()
			defer src.mu.Unlock()
			src.wal, src.walErr = v, err
		}}
	}
	src = &fakeSource{wal: 1 << 20, pruneErr: errors.New("lock timeout"), steps: []step{
		check(1<<20, 1, 0),
		setWAL(2<<20, nil),
		wait(4 * time.Second),
		check(1<<20, 1, 0),
		wait(time.Second),
		check(2<<20, 2, 0),
		setWAL(3<<20, errors.New("timeout")),
		wait(5 * time.Second),
		check(2<<20, 3, 0),
		wait(time.Minute),
		check(2<<20, 4, 1),
		wait(pruneEvery),
		check(2<<20, 5, 2),
	}}
	ct.stream(t, src)
	if !slices.Equal(src.prunes, []time.Duration{deleteLogAge, deleteLogAge}) {
		t.Errorf("pruned %v, want twice by %v", src.prunes, deleteLogAge)
	}
	if !strings.Contains(ct.log.String(), "delete log not pruned") {
		t.Errorf("a failed prune is not logged")
	}
}

// The lag counts from the commit of the oldest transaction received and
// not applied; once applied, it is that transaction's lag, and zero once
// the server has nothing newer.
func TestCaptureReportsTheLag(t *testing.T) {
	ct := newCaptureTest(t)
	hourAgo := time.Now().Add(-time.Hour)
	lag := func(min, max float64) step {
		return step{err: errIdle, do: func() {
			t.Helper()
			got := promregtest.Value(t, ct.reg, "warmcache_change_capture_lag_seconds")
			if got < min || got > max {
				t.Errorf("lag = %v, want in [%v, %v]", got, min, max)
			}
		}}
	}
	applied := func(want float64) step {
		return step{err: errIdle, do: func() {
			t.Helper()
			if got := promregtest.Value(t, ct.reg, "warmcache_change_capture_apply_lag_seconds"); got != want {
				t.Errorf("%v transactions observed in apply_lag_seconds, want %v", got, want)
			}
		}}
	}
	day := 24 * 3600.0
	src := &fakeSource{steps: script(relations(),
		[]step{lag(0, 0), applied(0)},
		msgs(xlog(0x10, begin(0x100, hourAgo, 1)), xlog(0x20, insert(relItems, text("1"), text(`1`), text("1")))),
		[]step{lag(3600, day)},
		msgs(xlog(0x100, commit(0x100, hourAgo))),
		[]step{lag(3600, day), applied(1)},
		msgs(keepalive(0x100, false)),
		[]step{lag(3600, day)},
		msgs(keepalive(0x200, false)),
		[]step{lag(0, 0), applied(1)},
	)}
	ct.stream(t, src)
}
