package pluggable_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	proto "github.com/dapr/dapr/pkg/proto/components/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/warmcache/warmcache/internal/dapr/pluggable"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// New refuses a namespace whose keys or values daprd's could not be
// stored in as they come.
func TestNewRefusesNamespaces(t *testing.T) {
	namespaces := []*warmcache.Namespace{
		{Name: "ints", Table: "ints", KeyType: warmcache.KeyBigint, Layout: warmcache.LayoutBytes, Writable: true},
		{Name: "json", Table: "json", KeyType: warmcache.KeyText, Layout: warmcache.LayoutPacked, Writable: true},
		{Name: "bytes", Table: "bytes", KeyType: warmcache.KeyText, Layout: warmcache.LayoutBytes, Writable: true},
	}
	clock := memtier.NewClock()
	svc, err := warmcache.NewService(memtier.NewHot(clock.Now), memtier.NewWarm(), namespaces, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler), warmcache.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		components []pluggable.Component
		want       string
	}{
		{"bigint keys", []pluggable.Component{{Name: "s", Namespace: "ints"}}, "text keys"},
		{"json values", []pluggable.Component{{Name: "s", Namespace: "json"}}, "bytes layout"},
		{"unknown namespace", []pluggable.Component{{Name: "s", Namespace: "nope"}}, "unknown namespace"},
		{"a name twice", []pluggable.Component{{Name: "s", Namespace: "bytes"}, {Name: "s", Namespace: "bytes"}}, "twice"},
		{"no component", nil, "no component"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pluggable.New(svc, tc.components, pluggable.Options{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error about %s", err, tc.want)
			}
		})
	}
	if _, err := pluggable.New(svc, []pluggable.Component{{Name: "s", Namespace: "bytes"}}, pluggable.Options{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("New over a text-keyed bytes namespace: %v", err)
	}
}

// Features lists TTL only for a component whose namespace keeps expiries.
func TestFeaturesFollowTheNamespace(t *testing.T) {
	namespaces := []*warmcache.Namespace{
		{Name: "plain", Table: "plain", KeyType: warmcache.KeyText, Layout: warmcache.LayoutBytes, Writable: true},
		{Name: "expiring", Table: "expiring", KeyType: warmcache.KeyText, Layout: warmcache.LayoutBytes, Writable: true, ExpiresColumn: "expires_at"},
	}
	clock := memtier.NewClock()
	svc, err := warmcache.NewService(memtier.NewHot(clock.Now), memtier.NewWarm(), namespaces, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler), warmcache.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := pluggable.New(svc, []pluggable.Component{{Name: "plain", Namespace: "plain"}, {Name: "expiring", Namespace: "expiring"}},
		pluggable.Options{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for component, want := range map[string][]string{
		"plain":    {"ETAG", "TRANSACTIONAL"},
		"expiring": {"ETAG", "TRANSACTIONAL", pluggable.FeatureTTL},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(pluggable.InstanceHeader, component))
		f, err := s.Features(ctx, &proto.FeaturesRequest{})
		if err != nil || !slices.Equal(f.GetFeatures(), want) {
			t.Errorf("Features of %s = %v, %v; want %v", component, f.GetFeatures(), err, want)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(pluggable.InstanceHeader, "other"))
	if _, err := s.Features(ctx, &proto.FeaturesRequest{}); status.Code(err) != codes.NotFound {
		t.Errorf("Features of an unknown component: %v; want NotFound", err)
	}
}
