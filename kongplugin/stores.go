package main

import (
	"strings"
	"sync"
	"time"

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
	s := failover.New(batch.New(redisstore.New(redisstore.NewClient(redisstore.Conn{
		Addrs: strings.Split(rc.Addrs, ","), MasterName: rc.MasterName, Cluster: rc.Cluster,
		Username: rc.Username, Password: rc.Password, DB: rc.DB,
		TLS: rc.TLS, ServerName: rc.ServerName, SkipVerify: rc.SkipVerify,
	}), redisstore.Options{Prefix: rc.Prefix}), batch.Options{}),
		failover.Options{Timeout: timeout})
	clusters[*rc] = s
	return s
}
