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
	stats, err := h.database(ctx)
	if err != nil {
		return nil, fmt.Errorf("stampede: %w", err)
	}
	defer stats.Close(context.WithoutCancel(ctx))

	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if err := openConnections(ctx, client, ts.base+"/healthz", n); err != nil {
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
	run := releaseTogether(ctx, client, ts.get(key), n)
	afterSQL, err := scrapeSQLQueries(ctx, metricsURL)
	if err != nil {
		return nil, err
	}
	run.SQLQueries = afterSQL - beforeSQL
	if run.IndexScans, err = awaitIndexScans(ctx, stats, beforeScans, run.SQLQueries); err != nil {
		return nil, err
	}
	return run, nil
}

// openConnections opens n connections of client: n concurrent requests to
// url, held until all have been sent, so that none of them can reuse
// another's connection.
func openConnections(ctx context.Context, client *http.Client, url string, n int) error {
	var answered, drained sync.WaitGroup
	hold := make(chan struct{})
	openErrs := make(chan error, n)
	for range n {
		answered.Add(1)
		drained.Add(1)
		go func() {
			defer drained.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
	return <-openErrs
}

// stampedeAnswer is what one request of the stampede got.
type stampedeAnswer struct {
	code   int
	source string
	lat    time.Duration
}

// releaseTogether sends n requests of target, all released by one
// barrier, and summarises their answers.
func releaseTogether(ctx context.Context, client *http.Client, target vegetaTarget, n int) *bench.StampedeRun {
	answers := make([]stampedeAnswer, n)
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
				answers[i] = stampedeAnswer{lat: time.Since(t0)}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = stampedeAnswer{code: resp.StatusCode, source: resp.Header.Get("X-Cache"), lat: time.Since(t0)}
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
	return run
}

// awaitIndexScans returns how much idx_scan over the table has risen since
// before. PostgreSQL publishes a backend's counters when the backend has
// been idle for up to about ten seconds: it waits (bounded) until idx_scan
// has risen by at least the queries the service counted, then reads once
// more a second later to let late counters land.
func awaitIndexScans(ctx context.Context, stats *pgx.Conn, before int64, queries float64) (int64, error) {
	var scans int64
	deadline := time.Now().Add(15 * time.Second)
	for {
		after, err := indexScans(ctx, stats)
		if err != nil {
			return 0, err
		}
		scans = after - before
		if float64(scans) >= queries && scans > 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Second):
	}
	if after, err := indexScans(ctx, stats); err == nil {
		scans = after - before
	}
	return scans, nil
}

// scrapeSQLQueries reads the service's warmcache_sql_queries_total for
// the widgets namespace, all ops and results summed.
func scrapeSQLQueries(ctx context.Context, url string) (float64, error) {
	return scrapeSum(ctx, url, "warmcache_sql_queries_total", map[string]string{"namespace": "widgets"})
}

// scrapeSum reads the service's metrics at url and sums the samples of
// metric whose labels include every pair of match.
func scrapeSum(ctx context.Context, url, metric string, match map[string]string) (float64, error) {
	text, err := scrape(ctx, url)
	if err != nil {
		return 0, err
	}
	return bench.SumSamples(text, metric, match), nil
}

// scrapeHistogram reads the service's histogram metric (all its series
// summed) from its metrics at url.
func scrapeHistogram(ctx context.Context, url, metric string) (bench.Histogram, error) {
	text, err := scrape(ctx, url)
	if err != nil {
		return bench.Histogram{}, err
	}
	return bench.ParseHistogram(text, metric, nil)
}

// scrape returns the service's metrics at url, in Prometheus's text format.
func scrape(ctx context.Context, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// scrapeFold reads the service's warmcache_batch_keys histogram: batches
// and keys per tier, since the service started.
func scrapeFold(ctx context.Context, url string) (bench.Fold, error) {
	text, err := scrape(ctx, url)
	if err != nil {
		return bench.Fold{}, err
	}
	sql, redis := map[string]string{"tier": "sql"}, map[string]string{"tier": "redis"}
	sum := func(metric string, ops ...string) (seconds, count float64) {
		for _, op := range ops {
			seconds += bench.SumSamples(text, metric+"_sum", map[string]string{"op": op})
			count += bench.SumSamples(text, metric+"_count", map[string]string{"op": op})
		}
		return seconds, count
	}
	f := bench.Fold{
		SQLQueries:   bench.SumSamples(text, "warmcache_batch_keys_count", sql),
		SQLKeys:      bench.SumSamples(text, "warmcache_batch_keys_sum", sql),
		RedisBatches: bench.SumSamples(text, "warmcache_batch_keys_count", redis),
		RedisKeys:    bench.SumSamples(text, "warmcache_batch_keys_sum", redis),
		LaneSpills:   bench.SumSamples(text, "warmcache_hot_lane_spills_total", nil),
	}
	f.SQLSeconds, _ = sum("warmcache_sql_query_duration_seconds", "lookup", "lookup_many")
	f.RedisReadSeconds, f.RedisReads = sum("warmcache_redis_duration_seconds", "get", "get_many")
	f.FillSeconds, f.Fills = sum("warmcache_redis_duration_seconds", "fill", "fill_many")
	return f, nil
}
