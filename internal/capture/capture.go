package capture

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Publication is the publication the migrations create over the managed
// namespace tables, the delete log and the generations.
const Publication = "warmcache_changes"

// errStandby means that another instance holds the slot.
var errStandby = errors.New("the replication slot is held by another instance")

// errSlotElsewhere means that a slot of the name exists in another database
// of the cluster (slot names are the cluster's, not a database's): this
// database's changes cannot be captured under that name.
var errSlotElsewhere = errors.New("a replication slot of this name belongs to another database of the cluster; give this database's service a slot of its own (--replication-slot)")

// maxBuffered bounds the changes held before they are applied: a larger
// transaction is applied in parts (pgoutput sends only committed
// transactions, so a part never needs to be undone), and confirmed at its
// commit.
const (
	maxBuffered      = 5000
	maxBufferedBytes = 16 << 20
)

// capture consumes the replication slot with pgoutput and applies each
// committed transaction to the caches before it confirms the transaction's
// position, so a restart replays what was not applied and loses nothing.
// One instance holds the slot; START_REPLICATION on a slot another session
// streams fails, so the others stand by and try again every retry interval,
// and take over within about that long once the holder's connection is gone.
type capture struct {
	dsn        string
	slot       string
	status     time.Duration
	retry      time.Duration
	namespaces []*warmcache.Namespace
	apply      Applier
	gens       *Generations
	m          *metrics
	log        *slog.Logger
	setMode    func(string)
	// now and after are the clock: time.Now and time.After.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
	// dial opens a session on the slot: connect.
	dial func(ctx context.Context) (slotConn, error)

	byTable   map[string]*warmcache.Namespace
	relations map[uint32]*pglogrepl.RelationMessage
	buffer    map[*warmcache.Namespace]map[string]warmcache.Change
	buffered  int
	// bufferedBytes is the size of the buffered values.
	bufferedBytes int
	kinds         map[*warmcache.Namespace]map[string]int
}

func newCapture(dsn, slot string, status, retry time.Duration, namespaces []*warmcache.Namespace, apply Applier, gens *Generations, m *metrics, setMode func(string), log *slog.Logger) *capture {
	c := &capture{dsn: dsn, slot: slot, status: status, retry: retry, namespaces: namespaces, apply: apply,
		gens: gens, m: m, log: log, setMode: setMode, now: time.Now, after: time.After, byTable: map[string]*warmcache.Namespace{}}
	c.dial = c.connect
	for _, ns := range namespaces {
		c.byTable[ns.Table] = ns
	}
	return c
}

// checkCapture says why change capture cannot run on the server of dsn, or
// nil when it can: wal_level must be logical, the role needs the
// replication right, and the migrations must have created the publication.
func checkCapture(ctx context.Context, dsn string) error {
	conn, err := connectSQL(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var walLevel string
	var canReplicate, published bool
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'),
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
		EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, Publication).Scan(&walLevel, &canReplicate, &published)
	if err != nil {
		return fmt.Errorf("check the server: %w", err)
	}
	switch {
	case walLevel != "logical":
		return fmt.Errorf("wal_level is %s, not logical (set wal_level = logical in postgresql.conf and restart PostgreSQL)", walLevel)
	case !canReplicate:
		return errors.New("the role has no replication right (ALTER ROLE ... REPLICATION)")
	case !published:
		return fmt.Errorf("the publication %s is missing (run warmcache migrate up)", Publication)
	}
	return nil
}

func connectSQL(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse the replication DSN: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// run holds or waits for the slot until ctx ends.
func (c *capture) run(ctx context.Context) {
	standby := false
	for {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errStandby):
			if !standby {
				c.log.Info("capture: standing by; another instance holds the replication slot", slog.String("slot", c.slot))
			}
			standby = true
			c.setMode(ModeStandby)
		default:
			standby = false
			c.setMode(ModeStandby)
			c.log.Warn("capture: change capture interrupted; retrying", slog.String("slot", c.slot), slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-c.after(c.retry):
		}
	}
}

// session takes the slot, creating it when it is missing or lost, and
// streams from it until an error.
func (c *capture) session(ctx context.Context) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.close(context.WithoutCancel(ctx))
	if err := c.ensureSlot(ctx, conn); err != nil {
		return err
	}
	if err := conn.startReplication(ctx); err != nil {
		if pgCode(err) == pgerrcode.ObjectInUse {
			return errStandby
		}
		return fmt.Errorf("start replication: %w", err)
	}
	c.setMode(ModeCapture)
	c.log.Info("capture: holding the replication slot; applying changes", slog.String("slot", c.slot))
	return c.stream(ctx, conn)
}

// errIdle means that no message came before the receive deadline.
var errIdle = errors.New("no message before the deadline")

// source is the replication slot as stream reads it: the messages of the
// replication stream, the confirmation of the position applied, and the
// catalog queries made on the side. *pgSource is the PostgreSQL one.
type source interface {
	// receive returns the next message of the stream, or an error wrapping
	// errIdle when ctx's deadline passes first.
	receive(ctx context.Context) (pgproto3.BackendMessage, error)
	// confirm tells the server that everything up to pos is applied.
	confirm(ctx context.Context, pos pglogrepl.LSN) error
	// walRetained returns the WAL that the server keeps for the slot, in
	// bytes.
	walRetained(ctx context.Context) (float64, error)
	// pruneDeletes removes the delete log's rows older than age.
	pruneDeletes(ctx context.Context, age time.Duration) error
}

// slotConn is one session on the replication slot: what ensureSlot and
// session ask of the server, and the source that stream reads. *pgSource
// is the PostgreSQL one. Errors of the server are *pgconn.PgError.
type slotConn interface {
	source
	// slotState reads the slot in the current database: whether it
	// exists, whether a session streams it, and its wal_status (empty when
	// null).
	slotState(ctx context.Context) (found, active bool, walStatus string, err error)
	// dropLost drops a slot that the server invalidated.
	dropLost(ctx context.Context) error
	// createSlot creates the slot with pgoutput.
	createSlot(ctx context.Context) error
	// dropCreated drops the slot that createSlot created.
	dropCreated(ctx context.Context) error
	// startReplication starts streaming the slot from its confirmed
	// position over the publication.
	startReplication(ctx context.Context) error
	close(ctx context.Context)
}

var _ slotConn = (*pgSource)(nil)

// pgSource is a replication slot of PostgreSQL: a replication connection
// streaming it and a plain connection for the catalog.
type pgSource struct {
	repl *pgconn.PgConn
	sql  *pgx.Conn
	slot string
}

func (s *pgSource) slotState(ctx context.Context) (found, active bool, walStatus string, err error) {
	var status *string
	err = s.sql.QueryRow(ctx, `SELECT active, wal_status FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`,
		s.slot).Scan(&active, &status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, "", nil
	case err != nil:
		return false, false, "", err
	case status != nil:
		walStatus = *status
	}
	return true, active, walStatus, nil
}

func (s *pgSource) dropLost(ctx context.Context) error {
	_, err := s.sql.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.slot)
	return err
}

func (s *pgSource) createSlot(ctx context.Context) error {
	_, err := pglogrepl.CreateReplicationSlot(ctx, s.repl, s.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication})
	return err
}

func (s *pgSource) dropCreated(ctx context.Context) error {
	return pglogrepl.DropReplicationSlot(ctx, s.repl, s.slot, pglogrepl.DropReplicationSlotOptions{})
}

func (s *pgSource) startReplication(ctx context.Context) error {
	return pglogrepl.StartReplication(ctx, s.repl, s.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
}

func (s *pgSource) close(ctx context.Context) {
	_ = s.repl.Close(ctx)
	_ = s.sql.Close(ctx)
}

func (s *pgSource) receive(ctx context.Context) (pgproto3.BackendMessage, error) {
	msg, err := s.repl.ReceiveMessage(ctx)
	if err != nil && pgconn.Timeout(err) {
		return nil, fmt.Errorf("%w: %w", errIdle, err)
	}
	return msg, err
}

func (s *pgSource) confirm(ctx context.Context, pos pglogrepl.LSN) error {
	return pglogrepl.SendStandbyStatusUpdate(ctx, s.repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos})
}

func (s *pgSource) walRetained(ctx context.Context) (float64, error) {
	var retained float64
	err := s.sql.QueryRow(ctx, `SELECT COALESCE((pg_current_wal_lsn() - restart_lsn)::float8, 0)
		FROM pg_replication_slots WHERE slot_name = $1`, s.slot).Scan(&retained)
	return retained, err
}

func (s *pgSource) pruneDeletes(ctx context.Context, age time.Duration) error {
	_, err := s.sql.Exec(ctx, `DELETE FROM warmcache_deletes WHERE deleted_at < now() - make_interval(secs => $1::bigint)`,
		int64(age/time.Second))
	return err
}

// prepare makes sure that the slot exists before the instance serves, so
// that a new slot's generation bump comes first: it creates the slot when
// it is missing or lost. errStandby means that another instance holds it.
func (c *capture) prepare(ctx context.Context) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.close(context.WithoutCancel(ctx))
	return c.ensureSlot(ctx, conn)
}

// connect opens a plain connection (for the catalog) and a replication
// connection, both straight to PostgreSQL.
func (c *capture) connect(ctx context.Context) (slotConn, error) {
	sqlConn, err := connectSQL(ctx, c.dsn)
	if err != nil {
		return nil, err
	}
	replCfg, err := pgconn.ParseConfig(c.dsn)
	if err != nil {
		_ = sqlConn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("parse the replication DSN: %w", err)
	}
	replCfg.RuntimeParams["replication"] = "database"
	if replCfg.ConnectTimeout == 0 {
		replCfg.ConnectTimeout = 5 * time.Second
	}
	repl, err := pgconn.ConnectConfig(ctx, replCfg)
	if err != nil {
		_ = sqlConn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	return &pgSource{repl: repl, sql: sqlConn, slot: c.slot}, nil
}

// ensureSlot creates the slot when it is missing or was invalidated, and
// then bumps every namespace's generation: what was written before the
// slot existed was not captured. It returns errStandby when another
// instance streams the slot.
func (c *capture) ensureSlot(ctx context.Context, conn slotConn) error {
	reset := ""
	found, active, walStatus, err := conn.slotState(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("read the slot: %w", err)
	case !found:
		reset = "created"
	case walStatus == "lost":
		c.log.Error("capture: the replication slot was invalidated (max_slot_wal_keep_size): changes were lost; creating it again",
			slog.String("slot", c.slot))
		if err := conn.dropLost(ctx); err != nil {
			return fmt.Errorf("drop the lost slot: %w", err)
		}
		reset = "lost"
	case active:
		return errStandby
	}
	if reset == "" {
		return nil
	}
	if err := conn.createSlot(ctx); err != nil {
		if pgCode(err) != pgerrcode.DuplicateObject {
			return fmt.Errorf("create the slot: %w", err)
		}
		// Either another instance created it in this database meanwhile,
		// or the name is taken in another database.
		found, _, _, err := conn.slotState(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("read the slot: %w", err)
		case found:
			return errStandby
		default:
			return fmt.Errorf("slot %q: %w", c.slot, errSlotElsewhere)
		}
	}
	c.m.slotResets.WithLabelValues(reset).Inc()
	if err := c.gens.bumpAll(ctx, "replication slot "+reset); err != nil {
		_ = conn.dropCreated(context.WithoutCancel(ctx))
		return fmt.Errorf("bump the generations after creating the slot: %w", err)
	}
	c.log.Warn("capture: replication slot created; every namespace moved to a new generation, since earlier changes were not captured",
		slog.String("slot", c.slot), slog.String("reason", reset))
	return nil
}

// stream applies the slot's transactions until an error. The slot's
// confirmed position moves only to the end of a transaction that is applied,
// or, between transactions, to the server's WAL end.
func (c *capture) stream(ctx context.Context, src source) error {
	c.relations = map[uint32]*pglogrepl.RelationMessage{}
	c.resetBuffer()
	var confirmed pglogrepl.LSN
	inTxn := false
	var nextStatus time.Time
	ch := chores{nextPrune: c.now().Add(time.Minute)}
	// The receives until the next status report share one deadline: a
	// context and its timer per report, not per message.
	var rctx deadline
	defer rctx.stop()
	for {
		now := c.now()
		if !now.Before(nextStatus) {
			if err := c.confirm(ctx, src, confirmed); err != nil {
				return err
			}
			nextStatus = now.Add(c.status)
			rctx.reset(ctx, nextStatus)
		}
		c.doChores(ctx, src, &ch, now)
		raw, err := src.receive(rctx.ctx)
		if err != nil {
			if errors.Is(err, errIdle) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		var data []byte
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			data = msg.Data
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			reply, err := c.keepalive(data[1:], &confirmed, inTxn)
			if err != nil {
				return err
			}
			if reply {
				nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("xlogdata: %w", err)
			}
			if err := c.message(ctx, src, xld.WALData, &confirmed, &inTxn); err != nil {
				return err
			}
		}
	}
}

// deadline is a context with a deadline that many calls share until reset
// replaces it.
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (d *deadline) reset(parent context.Context, t time.Time) {
	d.stop()
	d.ctx, d.cancel = context.WithDeadline(parent, t)
}

func (d *deadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// chores are what stream does on a schedule between messages: report the
// slot's WAL, and prune the delete log.
type chores struct {
	nextWAL, nextPrune time.Time
}

// doChores does the chores of ch that are due at now.
func (c *capture) doChores(ctx context.Context, src source, ch *chores, now time.Time) {
	if !now.Before(ch.nextWAL) {
		c.reportWAL(ctx, src)
		ch.nextWAL = now.Add(5 * time.Second)
	}
	if !now.Before(ch.nextPrune) {
		c.pruneDeletes(ctx, src)
		ch.nextPrune = now.Add(pruneEvery)
	}
}

// keepalive reads a primary keepalive message. Between transactions, with
// nothing buffered, confirmed moves to the server's WAL end. It reports
// whether the server asks for a status update at once.
func (c *capture) keepalive(data []byte, confirmed *pglogrepl.LSN, inTxn bool) (bool, error) {
	pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data)
	if err != nil {
		return false, fmt.Errorf("keepalive: %w", err)
	}
	if !inTxn && c.buffered == 0 && pkm.ServerWALEnd > *confirmed {
		*confirmed = pkm.ServerWALEnd
		c.m.caughtUp()
	}
	return pkm.ReplyRequested, nil
}

// message buffers, or at a commit applies, one pgoutput message of the
// stream. At a commit, confirmed moves to the transaction's end; inTxn
// says whether a transaction is open. A full buffer is applied at once,
// without moving confirmed.
func (c *capture) message(ctx context.Context, src source, walData []byte, confirmed *pglogrepl.LSN, inTxn *bool) error {
	msg, err := pglogrepl.Parse(walData)
	if err != nil {
		return fmt.Errorf("pgoutput: %w", err)
	}
	switch msg := msg.(type) {
	case *pglogrepl.RelationMessage:
		c.relations[msg.RelationID] = msg
	case *pglogrepl.BeginMessage:
		*inTxn = true
		c.m.pending(msg.CommitTime)
	case *pglogrepl.InsertMessage:
		c.row(msg.RelationID, msg.Tuple)
	case *pglogrepl.UpdateMessage:
		c.row(msg.RelationID, msg.NewTuple)
	case *pglogrepl.DeleteMessage, *pglogrepl.TruncateMessage:
		// A delete carries only the key: its version comes from the row
		// that the delete trigger adds to the delete log in the same
		// transaction. A truncate's trigger bumps the namespace's
		// generation in the same transaction.
	case *pglogrepl.CommitMessage:
		if err := c.flush(ctx, src, *confirmed); err != nil {
			return err
		}
		*confirmed = msg.TransactionEndLSN
		*inTxn = false
		c.m.applied(msg.CommitTime)
	}
	if c.buffered >= maxBuffered || c.bufferedBytes >= maxBufferedBytes {
		return c.flush(ctx, src, *confirmed)
	}
	return nil
}

// confirm tells the server that everything up to pos is applied.
func (c *capture) confirm(ctx context.Context, src source, pos pglogrepl.LSN) error {
	if pos == 0 {
		return nil
	}
	if err := src.confirm(ctx, pos); err != nil {
		return fmt.Errorf("confirm %s: %w", pos, err)
	}
	return nil
}

// reportWAL sets the WAL retained for the slot.
func (c *capture) reportWAL(ctx context.Context, src source) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	retained, err := src.walRetained(qctx)
	if err != nil {
		c.log.Debug("capture: WAL retained not read", slog.Any("err", err))
		return
	}
	c.m.walRetained.Set(retained)
}

// pruneDeletes removes the delete log's rows that are older than an hour:
// applied long ago.
func (c *capture) pruneDeletes(ctx context.Context, src source) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := src.pruneDeletes(qctx, deleteLogAge); err != nil {
		c.log.Warn("capture: delete log not pruned", slog.Any("err", err))
	}
}

// row buffers the change of one inserted or updated row.
func (c *capture) row(relID uint32, tuple *pglogrepl.TupleData) {
	rel := c.relations[relID]
	if rel == nil || tuple == nil {
		return
	}
	col := func(name string) (*pglogrepl.TupleDataColumn, bool) {
		for i, rc := range rel.Columns {
			if rc.Name == name && i < len(tuple.Columns) {
				tc := tuple.Columns[i]
				return tc, tc.DataType == pglogrepl.TupleDataTypeText
			}
		}
		return nil, false
	}
	switch rel.RelationName {
	case "warmcache_generations":
		name, ok1 := col("namespace")
		gen, ok2 := col("generation")
		if ok1 && ok2 {
			if g, err := strconv.ParseInt(string(gen.Data), 10, 64); err == nil {
				c.gens.set(string(name.Data), g, "change capture")
			}
		}
		return
	case "warmcache_deletes":
		name, ok1 := col("namespace")
		key, ok2 := col("key")
		version, ok3 := col("version")
		if !ok1 || !ok2 || !ok3 {
			return
		}
		ns := c.namespace(string(name.Data))
		v, err := strconv.ParseInt(string(version.Data), 10, 64)
		if ns == nil || err != nil {
			return
		}
		if k, err := ns.ParseKey(string(key.Data)); err == nil {
			c.add(ns, warmcache.Change{Key: k, Entry: warmcache.Entry{Version: v}}, "delete")
		}
		return
	}
	ns := c.byTable[rel.Namespace+"."+rel.RelationName]
	if ns == nil {
		ns = c.byTable[rel.RelationName]
	}
	if ns == nil {
		return
	}
	key, ok1 := col(ns.KeyColumn)
	version, ok2 := col(ns.VersionColumn)
	if !ok1 || !ok2 {
		return
	}
	k, err := ns.ParseKey(string(key.Data))
	v, err2 := strconv.ParseInt(string(version.Data), 10, 64)
	if err != nil || err2 != nil {
		return
	}
	// A row with an expiry (a TTL) is read from the warehouse, which
	// returns the expiry with it, or nothing once it has passed: in every
	// layout, so that no tier keeps its value past the expiry.
	if _, expiring := col(ns.ExpiresColumn); !expiring {
		if value, ok := col(ns.ValueColumn); ok {
			if b, ok := capturedValue(ns, value.Data); ok {
				c.add(ns, warmcache.Change{Key: k, Entry: warmcache.Entry{Found: true, Value: b, Version: v}}, "upsert")
				return
			}
		}
	}
	c.add(ns, warmcache.Change{Key: k, Entry: warmcache.Entry{Version: v}, Refresh: true}, "refresh")
}

// capturedValue returns the value the lookups of ns return for a row whose
// value column pgoutput sent as text, and false where the row must be read
// from the warehouse instead. jsonb's text output is the JSON the lookups
// return; bytea's text output (hex, \x..., or the older escape format) is
// decoded to its bytes; the columns layout is always read. A value stored
// out of line and not changed by an UPDATE is not sent ('u'), and the
// caller reads that row too.
func capturedValue(ns *warmcache.Namespace, text []byte) ([]byte, bool) {
	switch ns.Layout {
	case warmcache.LayoutPacked:
		return append([]byte(nil), text...), true
	case warmcache.LayoutBytes:
		return decodeBytea(text)
	}
	return nil, false
}

// decodeBytea decodes the text form of a bytea: hex (\x followed by two
// hex digits a byte, PostgreSQL's default bytea_output) or escape (bytes
// as they are, but \\ for a backslash and \ooo in octal for the others).
// It returns a new slice, never nil, and false for text in neither form.
func decodeBytea(text []byte) ([]byte, bool) {
	if hexText, ok := bytes.CutPrefix(text, []byte(`\x`)); ok {
		b := make([]byte, hex.DecodedLen(len(hexText)))
		if _, err := hex.Decode(b, hexText); err != nil {
			return nil, false
		}
		return b, true
	}
	b := make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		switch {
		case i+1 < len(text) && text[i+1] == '\\':
			b = append(b, '\\')
			i++
		case i+3 < len(text) && isOctal(text[i+1]) && isOctal(text[i+2]) && isOctal(text[i+3]) && text[i+1] <= '3':
			b = append(b, (text[i+1]-'0')<<6|(text[i+2]-'0')<<3|(text[i+3]-'0'))
			i += 3
		default:
			return nil, false
		}
	}
	return b, true
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func (c *capture) namespace(name string) *warmcache.Namespace {
	for _, ns := range c.namespaces {
		if ns.Name == name {
			return ns
		}
	}
	return nil
}

// add buffers a change, keeping the newest of a key.
func (c *capture) add(ns *warmcache.Namespace, ch warmcache.Change, kind string) {
	byKey := c.buffer[ns]
	if byKey == nil {
		byKey = map[string]warmcache.Change{}
		c.buffer[ns] = byKey
	}
	if old, ok := byKey[ch.Key.Text]; ok && old.Entry.Version > ch.Entry.Version {
		return
	}
	if _, ok := byKey[ch.Key.Text]; !ok {
		c.buffered++
	}
	c.bufferedBytes += len(ch.Entry.Value)
	byKey[ch.Key.Text] = ch
	if c.kinds[ns] == nil {
		c.kinds[ns] = map[string]int{}
	}
	c.kinds[ns][kind]++
}

func (c *capture) resetBuffer() {
	c.buffer = map[*warmcache.Namespace]map[string]warmcache.Change{}
	c.kinds = map[*warmcache.Namespace]map[string]int{}
	c.buffered = 0
	c.bufferedBytes = 0
}

// flush applies the buffered changes, trying again until they are applied
// or ctx ends; meanwhile it keeps confirming the last applied position, so
// that the server keeps the connection and the slot's position is held.
func (c *capture) flush(ctx context.Context, src source, confirmed pglogrepl.LSN) error {
	if c.buffered == 0 {
		return nil
	}
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := c.applyBuffer(ctx)
		if err == nil {
			if attempt > 0 {
				c.log.Info("capture: changes applied after retrying", slog.Int("attempts", attempt+1))
			}
			c.resetBuffer()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt == 0 {
			c.log.Warn("capture: applying changes failed; retrying, the slot's position is held", slog.Any("err", err))
		}
		if err := c.confirm(ctx, src, confirmed); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.after(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func (c *capture) applyBuffer(ctx context.Context) error {
	for ns, byKey := range c.buffer {
		if len(byKey) == 0 {
			continue
		}
		changes := make([]warmcache.Change, 0, len(byKey))
		for _, ch := range byKey {
			changes = append(changes, ch)
		}
		if err := c.apply.Apply(ctx, ns, changes); err != nil {
			return err
		}
		for kind, n := range c.kinds[ns] {
			c.m.changes.WithLabelValues(ns.Name, "capture", kind).Add(float64(n))
		}
		delete(c.buffer, ns)
		delete(c.kinds, ns)
	}
	return nil
}

// pgCode returns the SQLSTATE of err, empty when it has none.
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// undefinedTable reports whether err says that a table does not exist.
func undefinedTable(err error) bool { return pgCode(err) == pgerrcode.UndefinedTable }
