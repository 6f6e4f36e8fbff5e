package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/warmcache/warmcache/internal/tracing"
)

func TestOffIsNothing(t *testing.T) {
	var tp *tracing.Provider
	h := http.NotFoundHandler()
	if got := tp.HTTP(h, "x"); got == nil || tp.GRPCServerOptions() != nil || tp.PGTracer() != nil || tp.Core() != nil || tp.RedisInstrument() != nil {
		t.Fatal("a nil Provider must hand out nothing")
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
