// Package coherence holds the tests of the near cache's coherence across
// instances: two or three instances of the service in one process, each
// assembled as `warmcache serve` assembles it, share one database and one
// Redis prefix; a write through one must reach the others' near caches by
// the versioned invalidations, and a change by any Redis client by key
// tracking. The package holds no code outside its tests. Run it with
//
//	go test -count=1 -v ./e2e/coherence
package coherence
