package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/internal/lograte"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// The node-wide state. Kong gives each nginx worker its own instance of a plugin config, and
// drops idle ones after a minute, so counts cannot live on the instance: they live here, in
// one process per Kong node, keyed by the plugin's id (rule names start with it).
var (
	localMem = memstore.New(memstore.Options{})
	local    = rules.Each(localMem.Decide)

	clustersMu sync.Mutex
	clusters   = map[redisConf]*failover.Store{} // one client per distinct connection
	batches    []*batch.Store                    // their batched units, given back on exit

	starveLog lograte.Limiter // Redis timeouts of a starved plugin server: a line a second at most
	shareLog  lograte.Limiter // failed exchanges of the learned shares: a line a second at most
)

// shareError is told of a failed exchange of the learned shares (failover.Shares): the node
// keeps the shares it learned before, or limit / fallback_nodes without them.
func shareError(err error) {
	if ok, skipped := shareLog.Allow(); ok {
		log.Printf("diana: exchanging this node's share of the traffic with Redis failed, its fallback limits stay as learned before (%d more since the last line): %v", skipped, err)
	}
}

// starved is told of a Redis timeout the breaker did not count, the plugin server itself being
// short of CPU. It logs to the plugin server's log, which Kong copies into its error log.
func starved(wait time.Duration) {
	if ok, skipped := starveLog.Allow(); ok {
		log.Printf("diana: Redis timed out while the plugin server was starved of CPU (a goroutine waited %v): not counted against Redis; the request got the fail policy's decision (%d more since the last line)", wait, skipped)
	}
}

// clusterStore returns the shared cluster store of a Redis connection, built by store/stack as
// dianad's is, making it on first use. Clients are never closed: configs on the same connection
// reuse them, and there are as many as distinct connections configured. A CA, certificate or
// key file that cannot be read, or a certificate and key that are not a pair, make a store whose
// every decision fails with that error (the fail policy applies, logged), and is not kept, so
// that the next config change tries again.
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
	o := stack.Options{
		Conn: redisstore.Conn{Addrs: strings.Split(rc.Addrs, ","), MasterName: rc.MasterName, Cluster: rc.Cluster,
			Username: rc.Username, Password: rc.Password, DB: rc.DB,
			TLS: rc.TLS, ServerName: rc.ServerName, SkipVerify: rc.SkipVerify},
		Prefix: rc.Prefix, WaitReplicas: rc.Wait, Timeout: timeout, OnStarved: starved, OnShareError: shareError,
	}
	var err error
	for _, f := range []struct {
		field, path string
		into        *[]byte
	}{{"redis_ssl_ca_file", rc.CAFile, &o.Conn.CACert}, {"redis_ssl_cert_file", rc.CertFile, &o.Conn.ClientCert}, {"redis_ssl_key_file", rc.KeyFile, &o.Conn.ClientKey}} {
		if f.path != "" && err == nil {
			if *f.into, err = config.ReadRegular(f.path, config.MaxCA); err != nil {
				err = fmt.Errorf("%s: %w", f.field, err)
			}
		}
	}
	var st *stack.Stack
	if err == nil {
		if st, err = stack.New(o); err != nil {
			err = fmt.Errorf("redis_ssl_ca_file, redis_ssl_cert_file or redis_ssl_key_file: %w", err)
		}
	}
	if err != nil {
		return failover.New(failing{err}, failover.Options{Timeout: timeout})
	}
	clusters[*rc] = st.Store
	batches = append(batches, st.Batch)
	return st.Store
}

// failing is a backend whose every call fails with err: the store of a connection that cannot
// be made.
type failing struct{ err error }

func (f failing) Decide(_ context.Context, ops []*rules.Op) {
	for _, op := range ops {
		op.Err = f.err
	}
}

// flushBatches gives the batched units that expired unspent back to Redis every second, so that
// a key whose traffic stopped gets them back within their window (batch.Store.Flush).
func flushBatches() {
	for range time.Tick(time.Second) {
		clustersMu.Lock()
		bs := batches
		clustersMu.Unlock()
		for _, b := range bs {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = b.Flush(ctx) // a failed refund loses its units, as expiry would
			cancel()
		}
	}
}

// closeOnSignal waits for Kong to stop the plugin server (SIGTERM, or SIGINT), gives the
// batched units held back to Redis (within two seconds), and exits.
func closeOnSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	clustersMu.Lock()
	for _, b := range batches {
		if err := b.Close(ctx); err != nil {
			log.Printf("diana: batched units not given back: %v", err)
		}
	}
	clustersMu.Unlock()
	cancel()
	os.Exit(0)
}
