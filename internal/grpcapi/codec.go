package grpcapi

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// checkedCodec is the proto codec with one difference: a message that does
// not decode (a string field that is not valid UTF-8, a malformed wire
// format) is the client's mistake, answered INVALID_ARGUMENT. grpc-go
// answers a codec's error with INTERNAL, so the codec reports success,
// remembers the message as bad, and the interceptors (first in their
// chains) refuse it before any handler sees it.
type checkedCodec struct {
	encoding.CodecV2
	bad sync.Map // message pointer -> decode error
	// nbad counts the entries of bad, so that checking a message when none
	// is bad (nearly always) does not search the map. A message is decoded
	// before the interceptors see it, on the same goroutine.
	nbad atomic.Int64
}

func newCheckedCodec() *checkedCodec {
	return &checkedCodec{CodecV2: encoding.GetCodecV2(proto.Name)}
}

func (c *checkedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.nbad.Add(1)
		c.bad.Store(v, err)
	}
	return nil
}

// check returns the INVALID_ARGUMENT status of a message that did not
// decode, and forgets it.
func (c *checkedCodec) check(m any) error {
	if c.nbad.Load() == 0 {
		return nil
	}
	if err, ok := c.bad.LoadAndDelete(m); ok {
		c.nbad.Add(-1)
		return status.Errorf(codes.InvalidArgument, "the message does not decode: %v", err)
	}
	return nil
}

func (c *checkedCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.check(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (c *checkedCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &checkedStream{ServerStream: ss, codec: c})
}

// checkedStream refuses the received messages that did not decode.
type checkedStream struct {
	grpc.ServerStream
	codec *checkedCodec
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.check(m)
}
