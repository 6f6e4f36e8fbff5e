package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Query finds values by JSON containment, a page at a time.
func (a *API) Query(ctx context.Context, req *warmcachev1.QueryRequest) (*warmcachev1.QueryResponse, error) {
	if err := a.authorize(ctx, req.GetNamespace(), auth.ScopeRead); err != nil {
		return nil, a.toStatus(ctx, "Query", err)
	}
	page, err := a.svc.Query(ctx, req.GetNamespace(), req.GetMatch(), int(req.GetLimit()), req.GetAfter())
	if err != nil {
		return nil, a.toStatus(ctx, "Query", err)
	}
	resp := &warmcachev1.QueryResponse{Items: make([]*warmcachev1.Item, len(page.Rows)), Next: page.Next}
	for i, r := range page.Rows {
		resp.Items[i] = &warmcachev1.Item{Key: r.Key.Text, Value: r.Entry.Value, Version: r.Entry.Version}
	}
	return resp, nil
}

// Load bulk-loads the records of a client stream into the namespace named
// in its first message. The core validates every record, spools them, and
// loads them in one transaction once the stream has ended well; a bad
// record loads nothing. The stream is bounded like REST's _load body: at
// most MaxLoadBytes of messages (RESOURCE_EXHAUSTED over it), and a stream
// that sends nothing for LoadIdleTimeout is cut off (DEADLINE_EXCEEDED);
// in both cases nothing is loaded.
func (a *API) Load(stream warmcachev1.Cache_LoadServer) error {
	ctx := stream.Context()
	rcv := newReceiver(stream, a.opts.LoadIdleTimeout, a.opts.MaxLoadBytes)
	defer rcv.stop()
	first, err := rcv.next()
	if errors.Is(err, io.EOF) {
		return a.toStatus(ctx, "Load", fmt.Errorf("%w: the stream has no message; the first names the namespace", errInvalidRequest))
	}
	if err != nil {
		return a.toStatus(ctx, "Load", err)
	}
	namespace := first.GetNamespace()
	if namespace == "" {
		return a.toStatus(ctx, "Load", fmt.Errorf("%w: the first message must name the namespace", errInvalidRequest))
	}
	p, err := a.principal(ctx, namespace, auth.ScopeWrite)
	if err != nil {
		return a.toStatus(ctx, "Load", err)
	}
	src := &streamReader{rcv: rcv, namespace: namespace, pending: first.GetRecords()}
	res, err := a.svc.Load(ctx, namespace, src)
	p.LogWrite(ctx, a.log, "grpc", "load", namespace, "", err)
	if err != nil {
		return a.toStatus(ctx, "Load", err)
	}
	return stream.SendAndClose(&warmcachev1.LoadResponse{
		Records:      res.Lines,
		Inserted:     res.Inserted,
		Updated:      res.Updated,
		Unchanged:    res.Unchanged,
		Refreshed:    res.Refreshed,
		NotRefreshed: res.NotRefreshed,
	})
}

// errLoadIdle marks a Load stream that sent nothing for too long.
var errLoadIdle = errors.New("the load stream sent nothing")

// receiver reads a Load stream's messages in a goroutine of its own, so
// that a reader waiting for the next one can give up after the idle
// timeout; the handler then returns, which ends the stream and the
// goroutine's Recv.
type receiver struct {
	msgs     chan recvResult
	done     chan struct{}
	idle     time.Duration
	maxBytes int64
	bytes    int64
}

type recvResult struct {
	msg *warmcachev1.LoadRequest
	err error
}

func newReceiver(stream warmcachev1.Cache_LoadServer, idle time.Duration, maxBytes int64) *receiver {
	r := &receiver{msgs: make(chan recvResult), done: make(chan struct{}), idle: idle, maxBytes: maxBytes}
	go func() {
		for {
			msg, err := stream.Recv()
			select {
			case r.msgs <- recvResult{msg, err}:
			case <-r.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// next returns the next message, io.EOF at the end of the stream, or an
// error: the stream's, errLoadIdle, or ErrTooLarge past maxBytes.
func (r *receiver) next() (*warmcachev1.LoadRequest, error) {
	t := time.NewTimer(r.idle)
	defer t.Stop()
	select {
	case res := <-r.msgs:
		if res.err != nil {
			return nil, res.err
		}
		r.bytes += int64(proto.Size(res.msg))
		if r.bytes > r.maxBytes {
			return nil, fmt.Errorf("%w: a Load stream is at most %d bytes; nothing was loaded", warmcache.ErrTooLarge, r.maxBytes)
		}
		return res.msg, nil
	case <-t.C:
		return nil, fmt.Errorf("%w for %v; nothing was loaded", errLoadIdle, r.idle)
	}
}

func (r *receiver) stop() { close(r.done) }

// streamReader is a warmcache.RecordReader over a Load stream. A record's
// line is its 1-based position in the stream.
type streamReader struct {
	rcv       *receiver
	namespace string
	pending   []*warmcachev1.LoadRecord
	line      int64
}

var _ warmcache.RecordReader = (*streamReader)(nil)

func (r *streamReader) Read() (warmcache.LoadRecord, error) {
	for len(r.pending) == 0 {
		msg, err := r.rcv.next()
		if err != nil {
			return warmcache.LoadRecord{}, err // io.EOF at the end of the stream
		}
		if ns := msg.GetNamespace(); ns != "" && ns != r.namespace {
			return warmcache.LoadRecord{}, fmt.Errorf("%w: namespace changed from %q to %q within one load", errInvalidRequest, r.namespace, ns)
		}
		r.pending = msg.GetRecords()
	}
	rec := r.pending[0]
	r.pending = r.pending[1:]
	r.line++
	return warmcache.LoadRecord{Line: r.line, Key: rec.GetKey(), Value: rec.GetValue()}, nil
}
