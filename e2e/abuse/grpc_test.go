package abuse

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
)

// rawCodec sends requests that are already wire-encoded ([]byte) and
// discards answers, so that a test can send what a well-behaved client's
// marshaling refuses to (invalid UTF-8 in a string field).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

// grpcAbuse is one hostile or careless call and the code it must get.
type grpcAbuse struct {
	name string
	call func(ctx context.Context) error
	code codes.Code
	says string
}

// TestAbuseGRPC sends each class of bad input to the real binary over
// gRPC: every call must end with the stated code (never INTERNAL or
// UNAVAILABLE for the client's own mistake), and the peak RSS must stay
// under the stated bound.
func TestAbuseGRPC(t *testing.T) {
	s := startServer(t, "--max-load-bytes", "8388608", "--load-idle-timeout", "2s")
	c := s.grpcConn(t)
	w := func() context.Context { return withToken(context.Background(), tokenWriter) }
	if _, err := c.Put(w(), &warmcachev1.PutRequest{Namespace: "widgets", Key: "1", Value: []byte(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rawGet := func(namespace string, key []byte) func(context.Context) error {
		return func(ctx context.Context) error {
			var req []byte
			req = protowire.AppendTag(req, 1, protowire.BytesType)
			req = protowire.AppendString(req, namespace)
			req = protowire.AppendTag(req, 2, protowire.BytesType)
			req = protowire.AppendBytes(req, key)
			var resp []byte
			return cc.Invoke(ctx, "/warmcache.v1.Cache/Get", req, &resp, grpc.ForceCodecV2(rawCodec{}))
		}
	}
	load := func(ctx context.Context, msgs []*warmcachev1.LoadRequest, stall bool) error {
		stream, err := c.Load(ctx)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				break // the server ended the stream; its status comes from CloseAndRecv
			}
		}
		if stall {
			_, err := stream.Header() // waits, sending nothing, until the server ends the call
			if err == nil {
				_, err = stream.CloseAndRecv()
			}
			return err
		}
		_, err = stream.CloseAndRecv()
		return err
	}
	chunk := bytes.Repeat([]byte("z"), 900<<10)
	var big []*warmcachev1.LoadRequest // 10 MiB in messages under the 1 MiB message bound
	for i := 0; len(big)*len(chunk) < 10*mib; i++ {
		m := &warmcachev1.LoadRequest{Records: []*warmcachev1.LoadRecord{{Key: "1", Value: append(append([]byte(`"`), chunk...), '"')}}}
		if i == 0 {
			m.Namespace = "widgets"
		}
		big = append(big, m)
	}
	nested := []byte(strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000))

	abuses := []grpcAbuse{
		{"invalid UTF-8 key", rawGet("widgets", []byte("1\xff")), codes.InvalidArgument, "UTF-8"},
		{"invalid UTF-8 namespace", rawGet("wid\xffgets", []byte("1")), codes.InvalidArgument, "UTF-8"},
		{"oversized key", func(ctx context.Context) error {
			_, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "texts", Key: strings.Repeat("k", bigKey)})
			return err
		}, codes.InvalidArgument, "256 bytes"},
		{"empty key", func(ctx context.Context) error {
			_, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets"})
			return err
		}, codes.InvalidArgument, "empty"},
		{"bigint overflow", func(ctx context.Context) error {
			_, err := c.Get(ctx, &warmcachev1.GetRequest{Namespace: "widgets", Key: "9223372036854775808"})
			return err
		}, codes.InvalidArgument, ""},
		{"bidi override key", func(ctx context.Context) error {
			_, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "texts", Key: "a\u202eb", Value: []byte(`1`)})
			return err
		}, codes.InvalidArgument, "U+202E"},
		{"path trick namespace", func(ctx context.Context) error {
			_, err := c.Get(withToken(context.Background(), tokenReader), &warmcachev1.GetRequest{Namespace: "../widgets", Key: "1"})
			return err
		}, codes.NotFound, ""},
		{"non-JSON value", func(ctx context.Context) error {
			_, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "2", Value: []byte(`nope`)})
			return err
		}, codes.InvalidArgument, ""},
		{"deeply nested value", func(ctx context.Context) error {
			_, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "2", Value: nested})
			return err
		}, codes.InvalidArgument, "64 levels"},
		{"value over the message bound", func(ctx context.Context) error {
			_, err := c.Put(ctx, &warmcachev1.PutRequest{Namespace: "widgets", Key: "2", Value: bytes.Repeat([]byte("1"), 2*mib)})
			return err
		}, codes.ResourceExhausted, ""},
		{"query NUL", func(ctx context.Context) error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`{"a":"\u0000"}`)})
			return err
		}, codes.InvalidArgument, ""},
		{"query invalid UTF-8", func(ctx context.Context) error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte("{\"a\":\"\xff\"}")})
			return err
		}, codes.InvalidArgument, "UTF-8"},
		{"query huge exponent", func(ctx context.Context) error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`{"a":1e99999999}`)})
			return err
		}, codes.InvalidArgument, ""},
		{"query forged cursor", func(ctx context.Context) error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`{}`), After: "azI6MQ.AAAAAAAAAAAAAAAAAAAAAA"})
			return err
		}, codes.InvalidArgument, "cursor"},
		{"query SQL-looking filter is data", func(ctx context.Context) error {
			_, err := c.Query(ctx, &warmcachev1.QueryRequest{Namespace: "widgets", Match: []byte(`{"a":"'; DROP TABLE widgets; --"}`)})
			return err
		}, codes.OK, ""},
		{"mget over the key bound", func(ctx context.Context) error {
			keys := make([]string, 1001)
			for i := range keys {
				keys[i] = "1"
			}
			_, err := c.MGet(ctx, &warmcachev1.MGetRequest{Namespace: "widgets", Keys: keys})
			return err
		}, codes.ResourceExhausted, "at most 1000"},
		{"load of 10 MiB", func(ctx context.Context) error { return load(ctx, big, false) }, codes.ResourceExhausted, "8388608 bytes"},
		{"load that stalls", func(ctx context.Context) error {
			return load(ctx, []*warmcachev1.LoadRequest{{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{{Key: "601", Value: []byte(`1`)}}}}, true)
		}, codes.DeadlineExceeded, "nothing was loaded"},
		{"load without a namespace", func(ctx context.Context) error {
			return load(ctx, []*warmcachev1.LoadRequest{{Records: []*warmcachev1.LoadRecord{{Key: "1", Value: []byte(`1`)}}}}, false)
		}, codes.InvalidArgument, ""},
		{"load bad record", func(ctx context.Context) error {
			return load(ctx, []*warmcachev1.LoadRequest{{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{{Key: "x", Value: []byte(`1`)}}}}, false)
		}, codes.InvalidArgument, "line 1"},
		{"no key", func(context.Context) error {
			_, err := c.Get(context.Background(), &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"})
			return err
		}, codes.Unauthenticated, ""},
		{"bad key", func(context.Context) error {
			_, err := c.Get(withToken(context.Background(), "not-a-token"), &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"})
			return err
		}, codes.Unauthenticated, ""},
		{"other namespace's key", func(context.Context) error {
			_, err := c.Get(withToken(context.Background(), tokenOther), &warmcachev1.GetRequest{Namespace: "widgets", Key: "1"})
			return err
		}, codes.PermissionDenied, ""},
		{"read-only key writes", func(context.Context) error {
			_, err := c.Put(withToken(context.Background(), tokenReader), &warmcachev1.PutRequest{Namespace: "widgets", Key: "1", Value: []byte(`1`)})
			return err
		}, codes.PermissionDenied, ""},
		{"read-only key loads", func(context.Context) error {
			return load(withToken(context.Background(), tokenReader), []*warmcachev1.LoadRequest{{Namespace: "widgets", Records: []*warmcachev1.LoadRecord{{Key: "1", Value: []byte(`1`)}}}}, false)
		}, codes.PermissionDenied, ""},
	}
	s.resetPeakRSS(t)
	for _, a := range abuses {
		ctx, cancel := context.WithTimeout(w(), 60*time.Second)
		err := a.call(ctx)
		cancel()
		st := status.Convert(err)
		switch {
		case st.Code() == codes.Internal || st.Code() == codes.Unavailable || st.Code() == codes.Unknown:
			t.Errorf("%s: %v, a server error for a client's call", a.name, err)
		case st.Code() != a.code:
			t.Errorf("%s: %v, want %v", a.name, err, a.code)
		case a.says != "" && !strings.Contains(st.Message(), a.says):
			t.Errorf("%s: message %q does not say %q", a.name, st.Message(), a.says)
		}
	}
	const bound = 64 * mib
	peak := s.peakRSS(t)
	t.Logf("gRPC abuses: peak RSS %.1f MiB (bound %d MiB)", float64(peak)/mib, bound/mib)
	if peak > bound {
		t.Errorf("gRPC abuses: peak RSS %.1f MiB over the bound of %d MiB", float64(peak)/mib, bound/mib)
	}
	if r := s.do(t, "GET", "/v1/kv/widgets/601", tokenWriter, nil); r.status != 404 {
		t.Errorf("the record of the stalled gRPC load: %d %s, want 404", r.status, r.body)
	}
}

// An _mget whose values pass the answer's bound fails with 413 (REST) and
// RESOURCE_EXHAUSTED (gRPC), naming the bound, without reading every value
// first: the peak RSS stays under the stated bound.
func TestMGetAnswerBounded(t *testing.T) {
	s := startServer(t, "--max-response-bytes", "8388608")
	value := `"` + strings.Repeat("v", 1000000) + `"`
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = strconv.Itoa(i + 1)
		if r := s.do(t, "PUT", "/v1/kv/widgets/"+keys[i], tokenWriter, strings.NewReader(value)); r.status != 200 {
			t.Fatalf("PUT %s: %d %.200s", keys[i], r.status, r.body)
		}
	}
	body := `{"keys":[` + strings.Join(keys, ",") + `]}`
	const bound = 96 * mib
	for round := range 2 { // cold (the warehouse), then hot (Redis)
		s.resetPeakRSS(t)
		r := s.do(t, "POST", "/v1/kv/widgets/_mget", tokenWriter, strings.NewReader(body))
		if r.status != 413 || r.errorCode() != "too_large" || !strings.Contains(r.message(), "8388608 bytes") {
			t.Errorf("round %d: _mget of 40 values of 1 MB: %d %.200s, want 413 naming the bound", round, r.status, r.body)
		}
		_, err := s.grpcConn(t).MGet(withToken(context.Background(), tokenWriter), &warmcachev1.MGetRequest{Namespace: "widgets", Keys: keys})
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "8388608 bytes") {
			t.Errorf("round %d: gRPC MGet of 40 values of 1 MB: %v, want RESOURCE_EXHAUSTED naming the bound", round, err)
		}
		peak := s.peakRSS(t)
		t.Logf("round %d: peak RSS %.1f MiB (bound %d MiB)", round, float64(peak)/mib, bound/mib)
		if peak > bound {
			t.Errorf("round %d: peak RSS %.1f MiB over the bound of %d MiB", round, float64(peak)/mib, bound/mib)
		}
	}
	// Under the bound, the same values are served.
	r := s.do(t, "POST", "/v1/kv/widgets/_mget", tokenWriter, strings.NewReader(`{"keys":[1,2,3]}`))
	if r.status != 200 || len(r.body) < 3000000 {
		t.Errorf("_mget of 3 values: %d, %d bytes", r.status, len(r.body))
	}
}
