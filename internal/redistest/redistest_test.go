package redistest

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestTLSAndUsers: a server with TLS and ACL users answers the helpers' client, each user
// within its rules, and no one else; it restarts with the same settings. (Sentinel and Redis
// Cluster are exercised by store/redisstore's topology tests.)
func TestTLSAndUsers(t *testing.T) {
	ctx := context.Background()
	s := StartWith(t, Options{TLS: true, Users: []string{"diana on >secret ~diana:* +@all"}})
	for stage := range 2 {
		if err := s.Client().Set(ctx, "x", "1", 0).Err(); err != nil {
			t.Fatalf("stage %d: helpers' client: %v", stage, err)
		}
		o := s.Options()
		o.Username, o.Password = "diana", "secret"
		c := redis.NewClient(o)
		if err := c.Set(ctx, "diana:x", "1", 0).Err(); err != nil {
			t.Fatalf("stage %d: diana: %v", stage, err)
		}
		if err := c.Set(ctx, "other", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("stage %d: diana, SET outside diana:*: %v, want NOPERM", stage, err)
		}
		c.Close()
		o.Username, o.Password = "", ""
		c = redis.NewClient(o)
		if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("stage %d: default user: %v, want NOAUTH", stage, err)
		}
		c.Close()
		s.Restart()
	}
}

// A server whose port, or whose cluster bus's port, another process took after FreePort gave it
// starts on fresh ones (issue 40: a cold CI run lost the cluster bus's port to another package's
// redis-server).
func TestStartRetriesTakenPorts(t *testing.T) {
	for _, bus := range []bool{false, true} {
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		taken := held.Addr().(*net.TCPAddr).Port
		s := newServer(t, "redis-server")
		if bus {
			s.args = clusterArgs(t, s.dir)
			s.args[slices.Index(s.args, "--cluster-port")+1] = strconv.Itoa(taken)
		} else {
			s.port, s.Addr = taken, net.JoinHostPort("127.0.0.1", strconv.Itoa(taken))
		}
		s.run()
		if err := s.ping(); err != nil {
			t.Fatalf("bus %v: the server does not answer on %s: %v", bus, s.Addr, err)
		}
		if s.port == taken || slices.Contains(s.args, strconv.Itoa(taken)) {
			t.Errorf("bus %v: the server kept the taken port %d: %s %v", bus, taken, s.Addr, s.args)
		}
	}
}
