package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// acked is one write the store acknowledged, with its version and when it
// ran.
type acked struct {
	delete     bool
	version    int64
	start, end time.Time
}

// TestVersionsGrowAcrossDeletes races writers and deleters of the same few
// keys through one store, on every storage variant of both dialects, and
// checks what the cache's version rules rest on: a key's acknowledged
// versions follow real time (a write that began after another ended has a
// higher version), no two are equal, and the row the warehouse holds at
// the end is the acknowledged write of the highest version: a row present
// after a delete of a higher version is a write hidden by its own version.
func TestVersionsGrowAcrossDeletes(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			tables := packedLaneTables()
			dsn := migrated(t, w, tables)
			rounds, workers := 60, 6
			if w.Greenplum {
				rounds, workers = 15, 4
			}
			for _, tb := range tables {
				ns := tb.Namespace
				t.Run(ns.Name, func(t *testing.T) {
					s, err := openStore(t, pgstore.Options{DSN: dsn, MaxConns: int32(workers)}, prometheus.NewRegistry(), ns)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					raceVersions(t, s, ns, dsn, rounds, workers)
				})
			}
		})
	}
}

// raceVersions runs rounds of workers that each write or delete one fresh
// key at the same moment, then checks each key's history.
func raceVersions(t *testing.T, s warmcache.Warm, ns *warmcache.Namespace, dsn string, rounds, workers int) {
	ctx := testContext(t)
	histories := make(map[string][]acked)
	var mu sync.Mutex
	for round := range rounds {
		k := key(t, ns, strconv.Itoa(1_000_000+round))
		// The key exists before the race in half of the rounds, so that
		// deletes find a row to delete.
		if round%2 == 0 {
			e, err := s.Write(ctx, ns, []warmcache.Write{{Key: k, Value: value(ns, round, "seed")}})
			if err != nil {
				t.Fatalf("seed %s: %v", k.Text, err)
			}
			histories[k.Text] = append(histories[k.Text], acked{version: e[0].Version, start: time.Now(), end: time.Now()})
		}
		release := make(chan struct{})
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				<-release
				write := warmcache.Write{Key: k, Value: value(ns, i, "race"), Delete: i%2 == 1, AbsentOK: i%2 == 1}
				start := time.Now()
				e, err := s.Write(ctx, ns, []warmcache.Write{write})
				end := time.Now()
				switch {
				case errors.Is(err, warmcache.ErrConflict):
					return
				case err != nil:
					t.Errorf("write %s (delete %v): %v", k.Text, write.Delete, err)
					return
				case e[0].Version == 0:
					return // the delete of an absent key changes nothing
				}
				mu.Lock()
				histories[k.Text] = append(histories[k.Text], acked{delete: write.Delete, version: e[0].Version, start: start, end: end})
				mu.Unlock()
			})
		}
		close(release)
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	stored := storedVersions(t, ns, dsn)
	for k, h := range histories {
		slices.SortFunc(h, func(a, b acked) int { return int(a.version - b.version) })
		for i := 1; i < len(h); i++ {
			if h[i].version == h[i-1].version {
				t.Errorf("key %s: two writes acknowledged at version %d", k, h[i].version)
			}
		}
		for _, a := range h {
			for _, b := range h {
				if a.end.Before(b.start) && a.version > b.version {
					t.Errorf("key %s: a write at version %d ended before one that began later got version %d", k, a.version, b.version)
				}
			}
		}
		last := h[len(h)-1]
		got, present := stored[k]
		switch {
		case last.delete && present:
			t.Errorf("key %s: the warehouse holds version %d after a delete acknowledged at version %d (history %v)", k, got, last.version, versions(h))
		case !last.delete && !present:
			t.Errorf("key %s: the warehouse holds no row after a write acknowledged at version %d (history %v)", k, last.version, versions(h))
		case !last.delete && got != last.version:
			t.Errorf("key %s: the warehouse holds version %d, the last acknowledged write has %d (history %v)", k, got, last.version, versions(h))
		}
	}
}

// versions formats a key's history as the versions of its writes, "d" for
// a delete.
func versions(h []acked) string {
	var out []string
	for _, a := range h {
		if a.delete {
			out = append(out, fmt.Sprintf("d%d", a.version))
		} else {
			out = append(out, strconv.FormatInt(a.version, 10))
		}
	}
	return fmt.Sprint(out)
}

// storedVersions reads every key of ns's table with its version.
func storedVersions(t *testing.T, ns *warmcache.Namespace, dsn string) map[string]int64 {
	t.Helper()
	out := make(map[string]int64)
	withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s::text, %s FROM %s", pgx.Identifier{ns.KeyColumn}.Sanitize(),
			pgx.Identifier{ns.VersionColumn}.Sanitize(), pgx.Identifier(strings.Split(ns.Table, ".")).Sanitize()))
		if err != nil {
			t.Fatal(err)
		}
		var k string
		var v int64
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
	})
	return out
}
