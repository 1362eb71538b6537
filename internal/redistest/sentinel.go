package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is the Sentinels' down-after-milliseconds: how long a master may not answer
// before a Sentinel thinks it is down. A failover follows within a few seconds.
const SentinelDownAfter = time.Second

// Sentinel is a master, one replica and three Sentinels (redis-sentinel) watching them with a
// quorum of 2, all on loopback.
type Sentinel struct {
	MasterName    string
	SentinelAddrs []string
	Sentinels     []*Server
	Servers       []*Server // the first master and its replica

	t testing.TB
}

// StartSentinel starts a master, its replica and three Sentinels, and returns once the replica
// is in sync and every Sentinel knows the replica and the two other Sentinels (so that a
// failover can reach its quorum).
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{MasterName: "diana-master", t: t}
	master := newServer(t, "redis-server")
	master.run()
	replica := newServer(t, "redis-server")
	replica.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}
	replica.run()
	s.Servers = []*Server{master, replica}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	mc := redis.NewClient(master.Options())
	defer mc.Close()
	if err := waitFor(ctx, func() error { return replicaOnline(ctx, mc) }); err != nil {
		t.Fatalf("sentinel set-up: replica %s of %s: %v", replica.Addr, master.Addr, err)
	}
	for range 3 {
		sn := newServer(t, "redis-sentinel")
		// Sentinels rewrite their config file, so each gets one in its own directory. A short
		// failover-timeout lets a failed election be retried soon (after twice the timeout).
		sn.conf = filepath.Join(sn.dir, "sentinel.conf")
		conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 2000\n"+
			"sentinel parallel-syncs %s 1\n",
			s.MasterName, master.port, s.MasterName, SentinelDownAfter.Milliseconds(), s.MasterName, s.MasterName)
		if err := os.WriteFile(sn.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("write %s: %v", sn.conf, err)
		}
		sn.run()
		s.Sentinels = append(s.Sentinels, sn)
		s.SentinelAddrs = append(s.SentinelAddrs, sn.Addr)
	}
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		err := waitFor(ctx, func() error {
			m, err := c.Master(ctx, s.MasterName).Result()
			if err != nil {
				return err
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("knows %s replicas and %s other sentinels, want 1 and 2", m["num-slaves"], m["num-other-sentinels"])
			}
			return nil
		})
		c.Close()
		if err != nil {
			t.Fatalf("sentinel %s: %v", sn.Addr, err)
		}
	}
	return s
}

// replicaOnline checks that the master c has a replica in sync.
func replicaOnline(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(infoField(info, "slave0"), "state=online") {
		return fmt.Errorf("%s: no replica online: slave0:%s", c.Options().Addr, infoField(info, "slave0"))
	}
	return nil
}

// Client returns a go-redis Sentinel (failover) client of the master, as Diana makes one:
// context deadlines honoured. It is closed when the test ends.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Master returns the master's address as the first Sentinel that answers reports it.
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var errs []error
	for _, addr := range s.SentinelAddrs {
		a, err := s.masterBy(ctx, addr)
		if err == nil {
			return a, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no sentinel reports the master: %w", errors.Join(errs...))
}

func (s *Sentinel) masterBy(ctx context.Context, sentinel string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", sentinel, err)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// Failover kills the master's process (SIGKILL, as a crash would) and waits until every
// Sentinel reports the replica as the new master and the replica says it is a master. It
// returns the new master's address. Writes the old master had acknowledged but not yet sent to
// its replica are lost, as Redis replication is asynchronous. A Sentinel deployment has one
// replica, so Failover works once.
func (s *Sentinel) Failover(ctx context.Context) (string, error) {
	return s.failover(ctx, func(old *Server) error {
		old.Stop()
		return nil
	})
}

// ManualFailover asks a Sentinel for a failover (SENTINEL FAILOVER) while the master runs, and
// waits until every Sentinel reports the replica as the new master, the replica says it is a
// master, and the old master says it is a replica. It returns the new master's address. This
// failover is not coordinated with the clients: until the Sentinels turn the old master into a
// replica, it goes on acknowledging writes, which are then lost.
func (s *Sentinel) ManualFailover(ctx context.Context) (string, error) {
	return s.failover(ctx, func(*Server) error {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs[0]})
		defer c.Close()
		return c.Failover(ctx, s.MasterName).Err()
	})
}

// failover runs start on the master and waits as Failover and ManualFailover say.
func (s *Sentinel) failover(ctx context.Context, start func(master *Server) error) (string, error) {
	addr, err := s.Master(ctx)
	if err != nil {
		return "", err
	}
	var old, next *Server
	for _, srv := range s.Servers {
		switch {
		case srv.Addr == addr:
			old = srv
		case srv.Running():
			next = srv
		}
	}
	if old == nil || next == nil {
		return "", fmt.Errorf("failover: no replica left to promote (master is %s)", addr)
	}
	if err := start(old); err != nil {
		return "", fmt.Errorf("failover from %s: %w", addr, err)
	}
	err = waitFor(ctx, func() error {
		for _, a := range s.SentinelAddrs {
			if m, err := s.masterBy(ctx, a); err != nil || m != next.Addr {
				return fmt.Errorf("sentinel %s reports master %s (%v), want %s", a, m, err, next.Addr)
			}
		}
		if err := hasRole(ctx, next, "master"); err != nil {
			return err
		}
		if old.Running() {
			return hasRole(ctx, old, "slave")
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("failover from %s to %s: %w", addr, next.Addr, err)
	}
	return next.Addr, nil
}

// hasRole checks that ROLE on s replies role ("master", "slave").
func hasRole(ctx context.Context, s *Server, role string) error {
	c := redis.NewClient(s.Options())
	defer c.Close()
	r, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return err
	}
	if len(r) == 0 || r[0] != role {
		return fmt.Errorf("%s has role %v, want %s", s.Addr, r, role)
	}
	return nil
}
