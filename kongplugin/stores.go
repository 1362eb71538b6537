package main

import (
	"log"
	"strings"
	"sync"
	"time"

	"github.com/diana-gw/diana/internal/lograte"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
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

	starveLog lograte.Limiter // Redis timeouts of a starved plugin server: a line a second at most
)

// starved is told of a Redis timeout the breaker did not count, the plugin server itself being
// short of CPU. It logs to the plugin server's log, which Kong copies into its error log.
func starved(wait time.Duration) {
	if ok, skipped := starveLog.Allow(); ok {
		log.Printf("diana: Redis timed out while the plugin server was starved of CPU (a goroutine waited %v): not counted against Redis; the request got the fail policy's decision (%d more since the last line)", wait, skipped)
	}
}

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
	s := failover.New(batch.New(redisstore.New(redisstore.NewClient(redisstore.Conn{
		Addrs: strings.Split(rc.Addrs, ","), MasterName: rc.MasterName, Cluster: rc.Cluster,
		Username: rc.Username, Password: rc.Password, DB: rc.DB,
		TLS: rc.TLS, ServerName: rc.ServerName, SkipVerify: rc.SkipVerify,
	}), redisstore.Options{Prefix: rc.Prefix}), batch.Options{}),
		failover.Options{Timeout: timeout, OnStarved: starved})
	clusters[*rc] = s
	return s
}
