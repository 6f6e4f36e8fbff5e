package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"

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
// in its first message. The core validates every record and loads them in
// one transaction; a bad record loads nothing.
func (a *API) Load(stream warmcachev1.Cache_LoadServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return a.toStatus(ctx, "Load", fmt.Errorf("%w: the stream has no message; the first names the namespace", errInvalidRequest))
	}
	if err != nil {
		return err
	}
	namespace := first.GetNamespace()
	if namespace == "" {
		return a.toStatus(ctx, "Load", fmt.Errorf("%w: the first message must name the namespace", errInvalidRequest))
	}
	p, err := a.principal(ctx, namespace, auth.ScopeWrite)
	if err != nil {
		return a.toStatus(ctx, "Load", err)
	}
	src := &streamReader{stream: stream, namespace: namespace, pending: first.GetRecords()}
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

// streamReader is a warmcache.RecordReader over a Load stream. A record's
// line is its 1-based position in the stream.
type streamReader struct {
	stream    warmcachev1.Cache_LoadServer
	namespace string
	pending   []*warmcachev1.LoadRecord
	line      int64
}

var _ warmcache.RecordReader = (*streamReader)(nil)

func (r *streamReader) Read() (warmcache.LoadRecord, error) {
	for len(r.pending) == 0 {
		msg, err := r.stream.Recv()
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
