package rediscache

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// reloadAfterNodeError asks a Cluster client to reload the slot map in the
// background after a call failed for a reason other than a Redis reply:
// the node did not answer, as when a master has died. Without it, go-redis
// keeps sending a dead master's slots to it until its periodic reload
// (every 60s), long after a replica has taken over. Reloads are coalesced
// by go-redis and cheap. Standalone and Sentinel clients are left alone.
func (c *Cache) reloadAfterNodeError(err error) {
	cc, ok := c.client.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return
	}
	cc.ReloadState(context.Background()) // the reload runs in the background, on its own
}
