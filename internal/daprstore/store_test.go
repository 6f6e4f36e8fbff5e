package daprstore_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/daprstore"
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
		components []daprstore.Component
		want       string
	}{
		{"bigint keys", []daprstore.Component{{Name: "s", Namespace: "ints"}}, "text keys"},
		{"json values", []daprstore.Component{{Name: "s", Namespace: "json"}}, "bytes layout"},
		{"unknown namespace", []daprstore.Component{{Name: "s", Namespace: "nope"}}, "unknown namespace"},
		{"a name twice", []daprstore.Component{{Name: "s", Namespace: "bytes"}, {Name: "s", Namespace: "bytes"}}, "twice"},
		{"no component", nil, "no component"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := daprstore.New(svc, tc.components, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error about %s", err, tc.want)
			}
		})
	}
	if _, err := daprstore.New(svc, []daprstore.Component{{Name: "s", Namespace: "bytes"}}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("New over a text-keyed bytes namespace: %v", err)
	}
}
