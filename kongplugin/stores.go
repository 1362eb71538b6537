package main

import (
	"crypto/tls"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// The node-wide state. Kong gives each nginx worker its own instance of a plugin config, and
// drops idle ones after a minute, so counts cannot live on the instance: they live here, in
// one process per Kong node, keyed by the plugin's id (rule names start with it).
var (
	localMem = memstore.New(memstore.Options{})
	local    = rules.Each(localMem.Decide)

	clustersMu sync.Mutex
	clusters   = map[redisConf]*failover.Store{} // one client per distinct connection
)

// clusterStore returns the shared failover store of a Redis connection, making it on first
// use. Clients are never closed: configs on the same connection reuse them, and there are as
// many as distinct connections configured.
func clusterStore(rc *redisConf) rules.Store {
	if rc == nil {
		return nil
	}
	clustersMu.Lock()
	defer clustersMu.Unlock()
	if s, ok := clusters[*rc]; ok {
		return s
	}
	timeout := time.Duration(rc.TimeoutMS) * time.Millisecond
	s := failover.New(redisstore.New(newRedisClient(rc), redisstore.Options{Prefix: rc.Prefix}),
		failover.Options{Timeout: timeout})
	clusters[*rc] = s
	return s
}

// newRedisClient connects to a standalone Redis, a Sentinel group (MasterName) or a Cluster
// (several addresses, or Cluster set). Commands honour context deadlines, so failover's
// timeout bounds each decision; the client's own timeouts are short too, as a backstop.
func newRedisClient(rc *redisConf) redis.UniversalClient {
	o := &redis.UniversalOptions{
		Addrs:                 strings.Split(rc.Addrs, ","),
		MasterName:            rc.MasterName,
		Username:              rc.Username,
		Password:              rc.Password,
		DB:                    rc.DB,
		IsClusterMode:         rc.Cluster,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
	}
	if rc.TLS {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: rc.ServerName, InsecureSkipVerify: rc.SkipVerify}
	}
	return redis.NewUniversalClient(o)
}
