package redisstore

import (
	"crypto/tls"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conn says how to reach Redis.
type Conn struct {
	Addrs      []string // one: standalone (or a Cluster's endpoint with Cluster set); several: Cluster; the Sentinels with MasterName
	MasterName string   // Sentinel
	Cluster    bool     // a Redis Cluster even with one address
	Username   string   // ACL user
	Password   string
	DB         int
	TLS        bool
	ServerName string // TLS: the name to verify, when it is not the address's host
	SkipVerify bool   // TLS: do not verify the server's certificate
}

// NewClient returns a client for c, made for Store: commands honour context deadlines
// (ContextTimeoutEnabled), so that a caller's short timeout bounds each decision, and the
// client's own dial, read and write timeouts are short too, as a backstop.
func NewClient(c Conn) redis.UniversalClient {
	o := &redis.UniversalOptions{
		Addrs:                 c.Addrs,
		MasterName:            c.MasterName,
		IsClusterMode:         c.Cluster,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
	}
	if c.TLS {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.SkipVerify}
	}
	return redis.NewUniversalClient(o)
}
