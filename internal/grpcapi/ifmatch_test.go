package grpcapi_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
)

// TestContractExpectedVersionMalformed checks that an expected_version the
// server cannot read as a version (sent with another wire type, as a
// client built from a proto that types the ETag as a string does: empty,
// quoted, or a number in text) is refused with INVALID_ARGUMENT on Put and
// Delete, and writes or deletes nothing. Decoded as the generated code
// would, such a field is an unknown field and the call an unconditional
// write: the gRPC twin of REST's empty If-Match.
func TestContractExpectedVersionMalformed(t *testing.T) {
	c := newContract(t)
	ctx := callContext(t)
	put, err := c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		typ     protowire.Type
		payload []byte
	}{
		{"empty string", protowire.BytesType, protowire.AppendString(nil, "")},
		{"quoted version", protowire.BytesType, protowire.AppendString(nil, `"1"`)},
		{"fixed64", protowire.Fixed64Type, protowire.AppendFixed64(nil, 1)},
		{"fixed32", protowire.Fixed32Type, protowire.AppendFixed32(nil, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The field is expected_version: 4 in PutRequest, 3 in DeleteRequest.
			field := func(n protowire.Number) []byte {
				return append(protowire.AppendTag(nil, n, tc.typ), tc.payload...)
			}
			preq := &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`{"v":2}`)}
			preq.ProtoReflect().SetUnknown(field(4))
			_, err := c.client.Put(ctx, preq)
			wantCode(t, err, codes.InvalidArgument)
			dreq := &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "7"}
			dreq.ProtoReflect().SetUnknown(field(3))
			_, err = c.client.Delete(ctx, dreq)
			wantCode(t, err, codes.InvalidArgument)
			got, err := c.client.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "7"})
			if err != nil {
				t.Fatal(err)
			}
			if string(got.GetItem().GetValue()) != `{"v":1}` || got.GetItem().GetVersion() != put.GetItem().GetVersion() {
				t.Fatalf("after refused calls the key holds %s at version %d, want {\"v\":1} at %d",
					got.GetItem().GetValue(), got.GetItem().GetVersion(), put.GetItem().GetVersion())
			}
		})
	}
	// A well-typed expected_version is always a condition, zero included.
	zero := int64(0)
	_, err = c.client.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "7", Value: []byte(`{"v":3}`), ExpectedVersion: &zero})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = c.client.Delete(ctx, &warmcachev1.DeleteRequest{Namespace: "widgets", Key: "7", ExpectedVersion: &zero})
	wantCode(t, err, codes.FailedPrecondition)
}
