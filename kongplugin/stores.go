package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/stack"
)

// The node-wide state. Kong gives each nginx worker its own instance of a plugin config, and
// drops idle ones after a minute, so counts cannot live on the instance: they live here, in
// one process per Kong node, keyed by the plugin's id (rule names start with it).
var (
	localMem = memstore.New(memstore.Options{})
	local    = rules.Each(localMem.Decide)

	clustersMu sync.Mutex
	clusters   = map[string]*stack.Stack{} // one per distinct connection, by stack.Redis.Key
)

// clusterStore returns the shared cluster store of a Redis connection, built by store/stack as
// dianad's is, making it on first use; the stack's logs go to the plugin server's log, which
// Kong copies into its error log. Clients are never closed: configs on the same connection
// reuse them, and there are as many as distinct connections configured. A CA, certificate or
// key file that cannot be read, or a certificate and key that are not a pair, make a store whose
// every decision fails with that error (the fail policy applies, logged), and is not kept, so
// that the next config change tries again.
func clusterStore(rc *stack.Redis) rules.Store {
	if rc == nil {
		return nil
	}
	clustersMu.Lock()
	defer clustersMu.Unlock()
	key := rc.Key()
	if st, ok := clusters[key]; ok {
		return st.Store
	}
	r := *rc
	var err error
	r.ReadFiles(func(f stack.TLSFile, e error) {
		if err == nil {
			err = fmt.Errorf("%s: %w", [...]string{stack.CAFile: "redis_ssl_ca_file", stack.CertFile: "redis_ssl_cert_file", stack.KeyFile: "redis_ssl_key_file"}[f], e)
		}
	})
	var st *stack.Stack
	if err == nil {
		if st, err = stack.New(r, stack.Hooks{Log: slog.Default().With("plugin", "diana")}); err != nil {
			err = fmt.Errorf("redis_ssl_ca_file, redis_ssl_cert_file or redis_ssl_key_file: %w", err)
		}
	}
	if err != nil {
		return failover.New(failing{err}, failover.Options{Timeout: r.Timeout})
	}
	clusters[key] = st
	go st.Run(context.Background())
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

// closeOnSignal waits for Kong to stop the plugin server (SIGTERM, or SIGINT), gives the
// batched units held back to Redis (within two seconds), and exits.
func closeOnSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	clustersMu.Lock()
	for _, st := range clusters {
		st.Shutdown(ctx)
	}
	clustersMu.Unlock()
	cancel()
	os.Exit(0)
}
