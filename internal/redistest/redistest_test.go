package redistest

import (
	"context"
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
