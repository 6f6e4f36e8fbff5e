package pluggable

import (
	"context"
	"errors"
	"fmt"
	"strings"

	proto "github.com/dapr/dapr/pkg/proto/components/v1"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Get reads one key; an absent key is an empty response.
func (s *Store) Get(ctx context.Context, in *proto.GetRequest) (*proto.GetResponse, error) {
	_, namespace, err := s.component(ctx)
	if err != nil {
		return nil, s.fail(ctx, "Get", err)
	}
	it, found, err := dapr.Read(ctx, s.svc, namespace, in.GetKey(), dapr.StrongRead(in.GetConsistency()))
	if err != nil {
		return nil, s.fail(ctx, "Get", err)
	}
	if !found {
		return &proto.GetResponse{}, nil
	}
	resp := &proto.GetResponse{
		Data:     it.Entry.Value,
		Etag:     &proto.Etag{Value: dapr.ETag(it.Entry.Version)},
		Metadata: dapr.ItemMetadata(it),
	}
	// Only a value near the bound can make the answer too large: its ETag
	// and metadata take well under 64 KiB.
	if len(it.Entry.Value) > DaprdMaxRecvBytes-64<<10 {
		if err := fitsDaprd(resp); err != nil {
			return nil, s.fail(ctx, "Get", err)
		}
	}
	return resp, nil
}

// DaprdMaxRecvBytes is the largest answer daprd's client for pluggable
// components receives: gRPC's default, which it keeps
// (github.com/dapr/dapr pkg/components/pluggable/grpc.go).
const DaprdMaxRecvBytes = 4 << 20

// fitsDaprd refuses an answer larger than daprd receives
// (warmcache.ErrTooLarge, with its size), so that the application learns
// why instead of daprd failing to read it.
func fitsDaprd(resp protobuf.Message) error {
	if n := protobuf.Size(resp); n > DaprdMaxRecvBytes {
		return fmt.Errorf("%w: the answer holds %d bytes, more than the %d that daprd receives from a pluggable component; read fewer keys at once", warmcache.ErrTooLarge, n, DaprdMaxRecvBytes)
	}
	return nil
}

// BulkGet reads keys, one item per requested key in their order. The keys
// read with strong consistency are read from the warehouse, the others
// with one tiered read.
func (s *Store) BulkGet(ctx context.Context, in *proto.BulkGetRequest) (*proto.BulkGetResponse, error) {
	_, namespace, err := s.component(ctx)
	if err != nil {
		return nil, s.fail(ctx, "BulkGet", err)
	}
	reqs := in.GetItems()
	if len(reqs) > s.svc.MaxBatchKeys() {
		return nil, s.fail(ctx, "BulkGet", fmt.Errorf("%w: %d keys in one bulk get, at most %d", warmcache.ErrTooLarge, len(reqs), s.svc.MaxBatchKeys()))
	}
	resp := &proto.BulkGetResponse{Items: make([]*proto.BulkStateItem, len(reqs))}
	var tiered []string
	var at []int
	for i, r := range reqs {
		if !dapr.StrongRead(r.GetConsistency()) {
			tiered, at = append(tiered, r.GetKey()), append(at, i)
			continue
		}
		it, found, err := dapr.Read(ctx, s.svc, namespace, r.GetKey(), true)
		if err != nil {
			return nil, s.fail(ctx, "BulkGet", err)
		}
		resp.Items[i] = bulkItem(r.GetKey(), it, found)
	}
	if len(tiered) > 0 {
		items, err := dapr.BulkRead(ctx, s.svc, namespace, tiered)
		if err != nil {
			return nil, s.fail(ctx, "BulkGet", err)
		}
		for j, it := range items {
			resp.Items[at[j]] = bulkItem(it.Key, it.Item, it.Found)
		}
	}
	if err := fitsDaprd(resp); err != nil {
		return nil, s.fail(ctx, "BulkGet", err)
	}
	return resp, nil
}

func bulkItem(key string, it warmcache.Item, found bool) *proto.BulkStateItem {
	bi := &proto.BulkStateItem{Key: key}
	if found {
		bi.Data, bi.Etag, bi.Metadata = it.Entry.Value, &proto.Etag{Value: dapr.ETag(it.Entry.Version)}, dapr.ItemMetadata(it)
	}
	return bi
}

// Set saves one key.
func (s *Store) Set(ctx context.Context, in *proto.SetRequest) (*proto.SetResponse, error) {
	if err := s.write(ctx, []change{{set: in}}, nil); err != nil {
		return nil, s.fail(ctx, "Set", err)
	}
	return &proto.SetResponse{}, nil
}

// Delete deletes one key; an absent key is no error, unless the delete
// names an ETag.
func (s *Store) Delete(ctx context.Context, in *proto.DeleteRequest) (*proto.DeleteResponse, error) {
	if err := s.write(ctx, []change{{del: in}}, nil); err != nil {
		return nil, s.fail(ctx, "Delete", err)
	}
	return &proto.DeleteResponse{}, nil
}

// BulkSet saves keys.
func (s *Store) BulkSet(ctx context.Context, in *proto.BulkSetRequest) (*proto.BulkSetResponse, error) {
	changes := make([]change, len(in.GetItems()))
	for i, it := range in.GetItems() {
		changes[i] = change{set: it}
	}
	if err := s.bulk(ctx, changes); err != nil {
		return nil, s.fail(ctx, "BulkSet", err)
	}
	return &proto.BulkSetResponse{}, nil
}

// BulkDelete deletes keys.
func (s *Store) BulkDelete(ctx context.Context, in *proto.BulkDeleteRequest) (*proto.BulkDeleteResponse, error) {
	changes := make([]change, len(in.GetItems()))
	for i, it := range in.GetItems() {
		changes[i] = change{del: it}
	}
	if err := s.bulk(ctx, changes); err != nil {
		return nil, s.fail(ctx, "BulkDelete", err)
	}
	return &proto.BulkDeleteResponse{}, nil
}

// Transact applies sets and deletes in one SQL transaction: all or none.
func (s *Store) Transact(ctx context.Context, in *proto.TransactionalStateRequest) (*proto.TransactionalStateResponse, error) {
	changes := make([]change, len(in.GetOperations()))
	for i, op := range in.GetOperations() {
		switch r := op.GetRequest().(type) {
		case *proto.TransactionalStateOperation_Set:
			changes[i] = change{set: r.Set}
		case *proto.TransactionalStateOperation_Delete:
			changes[i] = change{del: r.Delete}
		default:
			return nil, s.fail(ctx, "Transact", fmt.Errorf("%w: operation %d is neither a set nor a delete", dapr.ErrMalformed, i))
		}
	}
	if err := s.write(ctx, changes, in.GetMetadata()); err != nil {
		return nil, s.fail(ctx, "Transact", err)
	}
	return &proto.TransactionalStateResponse{}, nil
}

// change is one set or delete of a write.
type change struct {
	set *proto.SetRequest
	del *proto.DeleteRequest
}

func (c change) key() string {
	if c.set != nil {
		return c.set.GetKey()
	}
	return c.del.GetKey()
}

// op maps the change to a core op, through the Dapr mapping (internal/dapr).
// The namespace stores bytes, so any content type goes. A
// value over maxValue bytes is refused with the bound and its flag.
func (c change) op(maxValue int) (warmcache.Op, error) {
	if c.set == nil && c.del == nil {
		return warmcache.Op{}, fmt.Errorf("%w: an empty operation", dapr.ErrMalformed)
	}
	if c.set != nil {
		if n := len(c.set.GetValue()); n > maxValue {
			return warmcache.Op{}, fmt.Errorf("%w: the value of %q holds %d bytes, more than the %d this component stores; "+
				"warmcache's --dapr-max-value-bytes (WARMCACHE_DAPR_MAX_VALUE_BYTES) raises the bound, and daprd's --max-body-size its own",
				warmcache.ErrTooLarge, c.set.GetKey(), n, maxValue)
		}
		return dapr.SaveOp(dapr.Save{Key: c.set.GetKey(), Value: c.set.GetValue(), ETag: dapr.ETagOf(c.set.GetEtag()),
			Concurrency: dapr.Concurrency(c.set.GetOptions().GetConcurrency()), Metadata: dapr.WithoutContentType(c.set.GetMetadata())})
	}
	return dapr.DeleteOp(dapr.Delete{Key: c.del.GetKey(), ETag: dapr.ETagOf(c.del.GetEtag()),
		Concurrency: dapr.Concurrency(c.del.GetOptions().GetConcurrency()), Metadata: c.del.GetMetadata()})
}

// write applies changes to the component's namespace in one transaction.
func (s *Store) write(ctx context.Context, changes []change, txMeta map[string]string) error {
	_, namespace, err := s.component(ctx)
	if err != nil {
		return err
	}
	if err := dapr.CheckMetadata(dapr.WithoutContentType(txMeta)); err != nil {
		return err
	}
	ops := make([]warmcache.Op, len(changes))
	for i, c := range changes {
		if ops[i], err = c.op(s.maxValue); err != nil {
			return err
		}
	}
	_, err = s.svc.Transact(ctx, namespace, ops)
	return err
}

// bulk applies a bulk set or delete: in one transaction, or, when an ETag
// does not hold, item by item, so that every item whose ETag holds is
// written. The error then wraps the first failure and names every key that
// failed.
func (s *Store) bulk(ctx context.Context, changes []change) error {
	err := s.write(ctx, changes, nil)
	if len(changes) < 2 || !etagFailure(err) {
		return err
	}
	var failed []string
	var first error
	for _, c := range changes {
		err := s.write(ctx, []change{c}, nil)
		switch {
		case err == nil:
		case etagFailure(err):
			failed = append(failed, c.key())
			if first == nil {
				first = err
			}
		default:
			return err
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%w (the ETag of %d of %d keys did not hold: %s; the others were written)",
		first, len(failed), len(changes), strings.Join(failed, ", "))
}

// etagFailure reports whether err is a precondition that did not hold.
func etagFailure(err error) bool {
	return errors.Is(err, warmcache.ErrVersionMismatch) || errors.Is(err, warmcache.ErrNotFound)
}
