package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key Diana writes in Redis unless a front end's settings say
// otherwise (Options.Prefix, failover.ShareOptions.Prefix, store/stack.Redis.Prefix).
const DefaultPrefix = "diana:"

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
	CACert     []byte // TLS: PEM certificates of the CAs to trust instead of the system's (a private CA)
	// TLS: a client certificate and its key (PEM), presented to a server that asks for one
	// (mutual TLS: redis-server's tls-auth-clients); both or neither.
	ClientCert, ClientKey []byte
}

// TLSConfig returns the TLS configuration of c: nil without TLS; with TLS, TLS 1.2 or later,
// verifying the server's certificate against CACert if it is set, else the system's roots, and
// presenting ClientCert if it is set. It fails if CACert or ClientCert is set without TLS, if
// CACert holds no PEM certificate, or if ClientCert and ClientKey are not a pair.
func (c Conn) TLSConfig() (*tls.Config, error) {
	if !c.TLS {
		if len(c.CACert) > 0 {
			return nil, errors.New("redisstore: Conn.CACert is set but TLS is off: set TLS too")
		}
		if len(c.ClientCert)+len(c.ClientKey) > 0 {
			return nil, errors.New("redisstore: Conn.ClientCert is set but TLS is off: set TLS too")
		}
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.SkipVerify}
	if len(c.CACert) > 0 {
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(c.CACert) {
			return nil, errors.New("redisstore: Conn.CACert: no PEM certificate found (want one or more -----BEGIN CERTIFICATE----- blocks)")
		}
	}
	if len(c.ClientCert)+len(c.ClientKey) > 0 {
		pair, err := tls.X509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, errors.New("redisstore: Conn.ClientCert and ClientKey: " + err.Error())
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}

// Open returns a client for c, made for Store: commands honour context deadlines
// (ContextTimeoutEnabled), so that a caller's short timeout bounds each decision, and the
// client's own dial, read and write timeouts are short too, as a backstop. It fails if c's TLS
// settings are invalid (see TLSConfig). The client is a Sentinel (failover) client with
// MasterName, a Cluster client with Cluster or several Addrs, else a plain client.
func Open(c Conn) (redis.UniversalClient, error) {
	t, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	o := options(c)
	o.TLSConfig = t
	return newUniversal(o), nil
}

// NewClient is Open for a Conn known to be valid. If c's TLS settings are invalid, the client
// still comes back, and every command on it fails with TLSConfig's error (no connection is
// made): use Open to find out at once.
func NewClient(c Conn) redis.UniversalClient {
	t, err := c.TLSConfig()
	o := options(c)
	o.TLSConfig = t
	if err != nil {
		o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nil, err }
	}
	return newUniversal(o)
}

// ClusterReload is how often a Cluster client reads the slot map again while it is used.
// go-redis reads it again at once on a MOVED or READONLY reply, but not when a master stops
// answering: without this, after a master crashes and its replica takes over, the failed
// master's slots would stay routed to the dead node until go-redis's default of 60 s. One
// CLUSTER SLOTS a second per client is cheap.
const ClusterReload = time.Second

// newUniversal is redis.NewUniversalClient, with ClusterReload for a Cluster client.
func newUniversal(o *redis.UniversalOptions) redis.UniversalClient {
	if o.MasterName == "" && (o.IsClusterMode || len(o.Addrs) > 1) {
		co := o.Cluster()
		co.ClusterStateReloadInterval = ClusterReload
		return redis.NewClusterClient(co)
	}
	return redis.NewUniversalClient(o)
}

func options(c Conn) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 c.Addrs,
		MasterName:            c.MasterName,
		IsClusterMode:         c.Cluster,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		ContextTimeoutEnabled: true,
		// No CLIENT SETINFO on each new connection: one round trip less before the first
		// decision on it, which a short decision timeout would otherwise have to cover (the
		// fault matrix saw a 20 ms slowdown keep new connections from ever being ready in 50 ms).
		DisableIdentity: true,
		DialTimeout:     time.Second,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
	}
}
