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
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
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
	clusters   = map[string]*failover.Store{} // by redisSettings.key: one client per distinct connection
	batches    []*batch.Store                 // their batched units, given back on exit

	stackLog = stack.Logger{Warn: logLine, Info: logLine} // what the cluster stores report
)

// logLine writes msg and its key-value pairs to the plugin server's log, which Kong copies into
// its error log, as the plugin's other lines.
func logLine(msg string, args ...any) {
	var b strings.Builder
	b.WriteString("diana: " + msg)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	log.Print(b.String())
}

// clusterStore returns the shared cluster store of a Redis connection, built by store/stack as
// dianad's is, making it on first use. Clients are never closed: configs on the same connection
// reuse them, and there are as many as distinct connections configured. A CA, certificate or
// key file that cannot be read, or a certificate and key that are not a pair, make a store whose
// every decision fails with that error (the fail policy applies, logged), and is not kept, so
// that the next config change tries again.
func clusterStore(rc *redisSettings) rules.Store {
	if rc == nil {
		return nil
	}
	clustersMu.Lock()
	defer clustersMu.Unlock()
	key := rc.key()
	if s, ok := clusters[key]; ok {
		return s
	}
	o := stack.Options{Settings: rc.Settings, OnState: stackLog.State, OnStarved: stackLog.Starved, OnShareError: stackLog.ShareError}
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
		return failover.New(failing{err}, failover.Options{Timeout: rc.Timeout})
	}
	clusters[key] = st.Store
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
