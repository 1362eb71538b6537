package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of the cluster nodes started here: a master
// that does not answer for this long is failed over to its replica within a few seconds.
const ClusterNodeTimeout = time.Second

// RedisCluster is a Redis Cluster of three masters with one replica each, on loopback.
type RedisCluster struct {
	Addrs []string // every node's address
	Nodes []*Server

	t testing.TB
}

// StartRedisCluster starts six cluster nodes, makes them a cluster of three masters with one
// replica each (redis-cli --cluster create --cluster-replicas 1), and returns once every node
// says cluster_state:ok and every replica is in sync.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed by this test and is not on PATH (make test installs it): %v", err)
	}
	c := &RedisCluster{t: t}
	for range 6 {
		s := newServer(t, "redis-server")
		s.args = clusterArgs(t, s.dir)
		s.run()
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatalf("redis cluster set-up: %v", err)
	}
	return c
}

// Client returns a go-redis cluster client, as Diana makes one: context deadlines honoured. It
// is closed when the test ends.
func (c *RedisCluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, master string // master: the id of a replica's master, "" for a master
	failed           bool
}

// nodes reads CLUSTER NODES from the first running node that answers.
func (c *RedisCluster) nodes(ctx context.Context) ([]node, error) {
	var errs []error
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rc := redis.NewClient(s.Options())
		txt, err := rc.ClusterNodes(ctx).Result()
		rc.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var out []node
		for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			n := node{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], failed: strings.Contains(f[2], "fail")}
			if strings.Contains(f[2], "slave") {
				n.master = f[3]
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no cluster node answers CLUSTER NODES: %w", errors.Join(errs...))
}

// Masters returns the addresses of the masters that are not failed, as a running node sees them.
func (c *RedisCluster) Masters(ctx context.Context) ([]string, error) {
	ns, err := c.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range ns {
		if n.master == "" && !n.failed {
			out = append(out, n.addr)
		}
	}
	return out, nil
}

// replicaOf returns the replica of the master at addr. A node may see another as failing for a
// moment (PFAIL: no answer within cluster-node-timeout, which a loaded machine can cause): it
// asks again until a live replica shows, or ctx ends.
func (c *RedisCluster) replicaOf(ctx context.Context, addr string) (*Server, error) {
	var r *Server
	err := waitFor(ctx, func() (err error) {
		r, err = c.liveReplicaOf(ctx, addr)
		return err
	})
	return r, err
}

// liveReplicaOf returns the replica of the master at addr that a running node sees as live.
func (c *RedisCluster) liveReplicaOf(ctx context.Context, addr string) (*Server, error) {
	ns, err := c.nodes(ctx)
	if err != nil {
		return nil, err
	}
	id := ""
	for _, n := range ns {
		if n.addr == addr && n.master == "" {
			id = n.id
		}
	}
	if id == "" {
		return nil, fmt.Errorf("%s is not a master of the cluster", addr)
	}
	for _, n := range ns {
		if n.master == id && !n.failed {
			if s := c.node(n.addr); s != nil && s.Running() {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("master %s has no live replica", addr)
}

func (c *RedisCluster) node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// KillMaster kills the process of the master at addr (SIGKILL, as a crash would) and waits
// until its replica is promoted and every running node says cluster_state:ok. It returns the
// new master's address. Writes the old master had acknowledged but not yet sent to its replica
// are lost, as Redis replication is asynchronous. Until the promotion the cluster is down for
// every key (cluster-require-full-coverage is on, Redis's default).
func (c *RedisCluster) KillMaster(ctx context.Context, addr string) (string, error) {
	r, err := c.replicaOf(ctx, addr)
	if err != nil {
		return "", err
	}
	c.node(addr).Stop()
	if err := c.waitPromoted(ctx, r); err != nil {
		return "", fmt.Errorf("failover of killed master %s to %s: %w", addr, r.Addr, err)
	}
	return r.Addr, nil
}

// ManualFailover runs CLUSTER FAILOVER on the replica of the master at addr and waits until the
// replica is the master and every running node says cluster_state:ok. It returns the new
// master's address. This failover loses nothing: the old master stops taking writes, the
// replica catches up with it, and only then are the roles swapped.
func (c *RedisCluster) ManualFailover(ctx context.Context, addr string) (string, error) {
	r, err := c.replicaOf(ctx, addr)
	if err != nil {
		return "", err
	}
	// A manual failover that does not complete within Redis's own bound (5 s: the old master
	// paused, the replica catching up, the votes; a loaded machine can take longer) is aborted
	// by Redis, and the roles stay: it is asked for again until the replica is a master, or
	// ctx ends.
	for hasRole(ctx, r, "master") != nil { // promoted late, by the last attempt: done
		rc := redis.NewClient(r.Options())
		err = rc.ClusterFailover(ctx).Err()
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("CLUSTER FAILOVER on %s: %w", r.Addr, err)
		}
		attempt, cancel := context.WithTimeout(ctx, manualFailoverTimeout)
		err = waitFor(attempt, func() error { return hasRole(attempt, r, "master") })
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("manual failover of %s to %s: %w", addr, r.Addr, err)
		}
	}
	if err := c.waitPromoted(ctx, r); err != nil {
		return "", fmt.Errorf("manual failover of %s to %s: %w", addr, r.Addr, err)
	}
	return r.Addr, nil
}

// manualFailoverTimeout is how long a manual failover is waited for before it is asked for
// again: Redis aborts one that has not completed in 5 s (CLUSTER_MF_TIMEOUT).
const manualFailoverTimeout = 6 * time.Second

// waitPromoted waits until r says it is a master and the cluster is healthy.
func (c *RedisCluster) waitPromoted(ctx context.Context, r *Server) error {
	return waitFor(ctx, func() error {
		if err := hasRole(ctx, r, "master"); err != nil {
			return err
		}
		return c.healthy(ctx, false)
	})
}

// waitHealthy waits until every running node says cluster_state:ok and every master has a
// replica in sync.
func (c *RedisCluster) waitHealthy(ctx context.Context) error {
	return waitFor(ctx, func() error { return c.healthy(ctx, true) })
}

// healthy checks that every running node says cluster_state:ok and, if replicas is set, that
// every master has a replica in sync.
func (c *RedisCluster) healthy(ctx context.Context, replicas bool) error {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rc := redis.NewClient(s.Options())
		err := clusterOK(ctx, rc)
		if err == nil && replicas {
			var info string
			if info, err = rc.Info(ctx, "replication").Result(); err == nil && infoField(info, "role") == "master" {
				err = replicaOnline(ctx, rc)
			}
		}
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
