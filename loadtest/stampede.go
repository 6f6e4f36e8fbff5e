package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// stampede sends n concurrent GETs for one key that is in no cache. Each
// request has its own connection, opened beforehand; all are released by
// one barrier. It counts the warehouse queries twice: the service's own
// counter and PostgreSQL's idx_scan over the table.
func (h *harness) stampede(ctx context.Context, ts targetSet, metricsURL string, n int, key int64) (*bench.StampedeRun, error) {
	stats, err := pgx.Connect(ctx, dsn(h.opts.PGHost, h.opts.Database))
	if err != nil {
		return nil, fmt.Errorf("stampede: connect: %w", err)
	}
	defer stats.Close(context.WithoutCancel(ctx))

	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// Open n connections: n concurrent requests to /healthz, held until all
	// have been sent, so that none of them can reuse another's connection.
	var answered, drained sync.WaitGroup
	hold := make(chan struct{})
	openErrs := make(chan error, n)
	for range n {
		answered.Add(1)
		drained.Add(1)
		go func() {
			defer drained.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.base+"/healthz", nil)
			resp, err := client.Do(req)
			answered.Done()
			if err != nil {
				openErrs <- err
				return
			}
			<-hold // the body stays unread, so the connection stays taken
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	answered.Wait()
	close(hold)
	drained.Wait()
	close(openErrs)
	if err := <-openErrs; err != nil {
		return nil, fmt.Errorf("stampede: open connections: %w", err)
	}

	beforeSQL, err := scrapeSQLQueries(ctx, metricsURL)
	if err != nil {
		return nil, err
	}
	beforeScans, err := indexScans(ctx, stats)
	if err != nil {
		return nil, err
	}

	target := ts.get(key)
	type answer struct {
		code   int
		source string
		lat    time.Duration
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target.URL, nil)
			for k, v := range target.Header {
				req.Header[k] = v
			}
			<-start
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				answers[i] = answer{lat: time.Since(t0)}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = answer{code: resp.StatusCode, source: resp.Header.Get("X-Cache"), lat: time.Since(t0)}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)

	run := &bench.StampedeRun{Requests: n, Sources: map[string]uint64{}, Wall: wall, IndexScans: -1}
	lat := make([]time.Duration, 0, n)
	for _, a := range answers {
		lat = append(lat, a.lat)
		if a.code == http.StatusOK {
			run.OK++
			run.Sources[a.source]++
		}
	}
	run.Latency = bench.Percentiles(lat)
	afterSQL, err := scrapeSQLQueries(ctx, metricsURL)
	if err != nil {
		return nil, err
	}
	run.SQLQueries = afterSQL - beforeSQL

	// PostgreSQL publishes a backend's counters when the backend has been
	// idle for up to about ten seconds: wait (bounded) until idx_scan has
	// risen by at least what the service counted.
	deadline := time.Now().Add(15 * time.Second)
	for {
		after, err := indexScans(ctx, stats)
		if err != nil {
			return nil, err
		}
		run.IndexScans = after - beforeScans
		if float64(run.IndexScans) >= run.SQLQueries && run.IndexScans > 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	// Let late counters land: one more read a second later.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	if after, err := indexScans(ctx, stats); err == nil {
		run.IndexScans = after - beforeScans
	}
	return run, nil
}

// scrapeSQLQueries reads the service's warmcache_sql_queries_total for
// the widgets namespace, all ops and results summed.
func scrapeSQLQueries(ctx context.Context, url string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return bench.SumSamples(string(body), "warmcache_sql_queries_total", map[string]string{"namespace": "widgets"}), nil
}

// scrapeFold reads the service's warmcache_batch_keys histogram: batches
// and keys per tier, since the service started.
func scrapeFold(ctx context.Context, url string) (bench.Fold, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return bench.Fold{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return bench.Fold{}, fmt.Errorf("scrape %s: %s %v", url, resp.Status, err)
	}
	text := string(body)
	sql, redis := map[string]string{"tier": "sql"}, map[string]string{"tier": "redis"}
	return bench.Fold{
		SQLQueries:   bench.SumSamples(text, "warmcache_batch_keys_count", sql),
		SQLKeys:      bench.SumSamples(text, "warmcache_batch_keys_sum", sql),
		RedisBatches: bench.SumSamples(text, "warmcache_batch_keys_count", redis),
		RedisKeys:    bench.SumSamples(text, "warmcache_batch_keys_sum", redis),
	}, nil
}
