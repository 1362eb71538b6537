package server

import (
	"crypto/tls"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/rlqs"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// Version is the config format this dianad reads.
const Version = 1

// Config is a dianad config document (schema/dianad.schema.json).
type Config struct {
	Listen         string      // the reverse proxy's address; "" runs the decision service only
	Connections    Connections // the reverse proxy's connections
	Admin          Admin
	LocalStore     LocalStore
	TrustedProxies []netip.Prefix
	ClientIPHeader httplimit.ClientIPHeader // the header the trusted proxies write the client address in
	IPv6Prefix     int
	EscapedSlashes rules.EscapedSlashes // what %2F, %5C and '\' in a request's path are
	StripDots      bool                 // strip trailing dots and spaces from each path segment
	ConsumerHeader string
	AccessLog      bool // a log line per request the proxy answers
	Upstreams      []Upstream
	Redis          *stack.Redis // nil: no cluster mode
	Remote         Remote
	RLS            *RLS // nil: no rate limit service
	Rules          []*rules.Rule
}

// RLS is Envoy's rate limit service (gRPC), a drop-in for envoyproxy/ratelimit: its descriptor
// config files are read from ConfigDir, reloaded when they change.
type RLS struct {
	Listen    string
	ConfigDir string
	Mode      rules.Mode       // where the limits are counted
	OnError   rules.FailPolicy // cluster mode, when Redis cannot decide
	Nodes     int64            // on_error local: each node counts its share of every limit
	Headers   bool             // the RateLimit-* headers in every answer
	Metadata  bool             // the dynamic metadata of envoyproxy/ratelimit in every answer
	QuotaMode bool             // every descriptor in quota_mode (its QUOTA_MODE)
	Shadow    bool             // every answer OK (its SHADOW_MODE)
	Merge     bool             // the files of one domain merged (its MERGE_DOMAIN_CONFIG)
	Quota     Quota            // the rate limit quota service on the same listener
	// Connections bound the listener's connections and their streams.
	Connections GRPCConnections
}

// Quota bounds Envoy's rate limit quota service (package rlqs), served beside the RLS.
type Quota struct {
	MaxBucketsPerStream, MaxBuckets, MaxStreams int
	AssignmentTTL                               time.Duration
}

// Admin is the listener of the decision API (/v1/check), /metrics and /healthz.
type Admin struct {
	Listen string
	Token  string // if set, /v1/check needs "Authorization: Bearer TOKEN"
	// AllowUnauthenticated lets the listener start on an address other than loopback without a
	// token: whoever reaches it may spend any client's quota through /v1/check.
	AllowUnauthenticated bool
	Connections          Connections
}

// Connections bound a listener's connections, as nginx's directives of the same names do.
type Connections struct {
	Max              int           // open connections at most; 0: derived from the open-file limit at start
	KeepaliveTimeout time.Duration // an idle keep-alive connection is closed after it; 0: no keep-alive
	HeaderTimeout    time.Duration // to read a request's header
	BodyTimeout      time.Duration // between two reads of a request's body
	SendTimeout      time.Duration // between two writes of a response
}

// LocalStore is the in-process store of local rules' state.
type LocalStore struct {
	MaxKeys int // identities kept at most; when full, the entry closest to expiry makes room
}

// Upstream is where matching requests are proxied; the first upstream whose match matches wins.
type Upstream struct {
	Name  string
	URL   *url.URL // scheme "demo" is the built-in demo upstream
	Match rules.Match
}

// Remote is the remote config source, whose rules win over the file's while it is reachable.
type Remote struct {
	URL          string
	Headers      map[string]string
	RedisKey     string
	RedisChannel string
	Interval     time.Duration
}

// Decode reads and checks a config document; errors name the source, the field and the reason.
// A remote document (remote true) may hold only version and rules: it replaces the rules and
// nothing else.
func Decode(doc conf.Value, source string, remote bool) (*Config, error) {
	errs := &conf.Errors{Source: source}
	c := DecodeObj(conf.Read(doc, errs), remote)
	return c, errs.Err()
}

// DecodeObj reads a config document from o, recording its errors there: the grammar of
// dianad's document, which schema/dianad.schema.json is generated from (conf.Describe).
func DecodeObj(o *conf.Obj, remote bool) *Config {
	o.Require("version")
	if v := o.Int("version", Version, 1, 1<<31); v != Version {
		o.Fail("version", "this dianad reads version 1 (a newer dianad may read this file)")
	}
	c := &Config{Rules: rules.Decode(o)}
	if !remote {
		c.decodeServer(o)
	}
	o.Done()
	return c
}

// listenAddr and redisAddr are the forms of a listener's address (host:port, port 0–65535,
// host optional: every interface; "" for none) and of a Redis server's (host:port, port
// 1–65535). The readers state them (conf.Obj.Matching), and the schema's patterns come from
// there.
var (
	listenAddr = regexp.MustCompile(`^$|^(\[[^\]]*\]|[^:\[\]]*):(0|[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$`)
	redisAddr  = regexp.MustCompile(`^(\[[^\]]+\]|[^:\[\]]+):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$`)
)

// listen reads a listener's address dianad could listen on (an empty one is none).
func listen(o *conf.Obj, def string) string {
	return o.Matching("listen", def, listenAddr, "host:port with a port from 0 to 65535 (the host may be empty: every interface)")
}

// decodeServer reads what dianad runs around the rules: its listeners, upstreams, stores, remote
// config source and rate limit service.
func (c *Config) decodeServer(o *conf.Obj) {
	c.Listen = listen(o, ":8080")
	c.Connections = decodeConnections(o.Obj("connections"))
	c.Admin = decodeAdmin(o.Obj("admin"))
	ls := o.Obj("local_store")
	c.LocalStore.MaxKeys = int(ls.Int("max_keys", memstore.DefaultMaxEntries, 64, 1<<30))
	ls.Done()
	if c.Listen == "" && c.Admin.Listen == "" {
		o.Fail("listen", "cannot be empty when admin.listen is empty too: dianad would serve nothing")
	}
	var err error
	if c.TrustedProxies, err = httplimit.ParsePrefixes(o.Strings("trusted_proxies")); err != nil {
		o.Fail("trusted_proxies", err.Error())
	}
	c.ClientIPHeader = httplimit.ClientIPHeader(o.EnumIndex("client_ip_header", httplimit.ClientIPHeaderNames[:]...))
	c.IPv6Prefix = int(o.Int("ipv6_prefix", 64, 1, 128))
	c.EscapedSlashes = rules.DecodeEscapedSlashes(o)
	c.StripDots = o.Bool("strip_trailing_dots_spaces", false)
	c.ConsumerHeader = o.String("consumer_header", "")
	c.AccessLog = o.Bool("access_log", false)
	c.Upstreams = decodeUpstreams(o)
	if o.Has("redis") {
		c.Redis = decodeRedis(o.Obj("redis"))
	}
	c.Remote = decodeRemote(o.Obj("remote"), c.Redis != nil)
	if o.Has("rls") {
		c.RLS = decodeRLS(o.Obj("rls"), c.Redis != nil)
	}
	for i, r := range c.Rules {
		if r.Mode == rules.Cluster && c.Redis == nil {
			o.Fail("rules["+strconv.Itoa(i)+"].mode", "cluster mode needs the redis section")
		}
	}
}

// decodeAdmin reads the admin listener; a token is required unless it listens on loopback
// only, or allow_unauthenticated says to run it open.
func decodeAdmin(a *conf.Obj) Admin {
	var ad Admin
	ad.Listen = listen(a, "127.0.0.1:9090")
	ad.Token = secret(a, "token", "token_file", "DIANA_ADMIN_TOKEN")
	ad.AllowUnauthenticated = a.Bool("allow_unauthenticated", false)
	if ad.Listen != "" && ad.Token == "" && !ad.AllowUnauthenticated && !loopback(ad.Listen) && !a.Failed("listen", "token_file") {
		a.Fail("token", "must be set (or token_file, or DIANA_ADMIN_TOKEN) when admin.listen ("+quote(ad.Listen)+
			") is not a loopback address: whoever reaches it could spend any client's quota and start bans through /v1/check; "+
			"set admin.allow_unauthenticated: true to run it open anyway")
	}
	ad.Connections = decodeConnections(a.Obj("connections"))
	a.Done()
	return ad
}

// decodeUpstreams reads the upstreams of o: each named once, with an absolute http, https or
// demo URL.
func decodeUpstreams(o *conf.Obj) []Upstream {
	var ups []Upstream
	names := map[string]bool{}
	for _, uo := range o.List("upstreams") {
		uo.Require("name", "url")
		u := Upstream{Name: uo.String("name", "")}
		if uo.Has("name") && u.Name == "" {
			uo.Fail("name", "cannot be empty (it is the route dimension's value)")
		} else if names[u.Name] && u.Name != "" {
			uo.Fail("name", "another upstream has the name "+quote(u.Name))
		}
		names[u.Name] = true
		raw := uo.String("url", "")
		if uo.Has("url") {
			var err error
			if u.URL, err = url.Parse(raw); err != nil || u.URL.Scheme == "" || (u.URL.Scheme != "demo" && u.URL.Host == "") {
				uo.Fail("url", "must be an absolute URL such as http://127.0.0.1:9000 (or demo: for the built-in demo), got "+quote(raw))
			} else if u.URL.Scheme != "http" && u.URL.Scheme != "https" && u.URL.Scheme != "demo" {
				uo.Fail("url", "scheme must be http, https or demo, got "+quote(u.URL.Scheme))
			}
		}
		u.Match = rules.DecodeMatch(uo.Obj("match"))
		uo.Done()
		ups = append(ups, u)
	}
	return ups
}

// decodeRemote reads the remote config source: a URL, or a Redis key (with the redis section,
// redis) and the channel announcing its changes.
func decodeRemote(rm *conf.Obj, redis bool) Remote {
	var r Remote
	r.URL = rm.String("url", "")
	keys, vals := rm.StringMap("headers")
	for i, k := range keys {
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		r.Headers[k] = vals[i]
	}
	r.RedisKey = rm.String("redis_key", "")
	r.RedisChannel = rm.String("redis_channel", r.RedisKey)
	r.Interval = duration(rm, "interval", 5*time.Second, 100*time.Millisecond, 24*time.Hour)
	if r.URL != "" && r.RedisKey != "" {
		rm.Fail("redis_key", "cannot be combined with url: choose one remote source")
	}
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			rm.Fail("url", "must be an http or https URL, got "+quote(r.URL))
		}
	}
	if len(keys) > 0 && r.URL == "" {
		rm.Fail("headers", "apply only to a url source, and there is no url")
	}
	if rm.Has("redis_channel") && r.RedisKey == "" {
		rm.Fail("redis_channel", "applies only with redis_key, and there is none")
	}
	if r.RedisKey != "" && !redis {
		rm.Fail("redis_key", "needs the redis section (the connection to read it from)")
	}
	rm.Done()
	return r
}

// defaultConnections are nginx's: keepalive_timeout 75s, client_header_timeout,
// client_body_timeout and send_timeout 60s; no cap but the open-file limit's share.
var defaultConnections = Connections{
	KeepaliveTimeout: 75 * time.Second,
	HeaderTimeout:    60 * time.Second,
	BodyTimeout:      60 * time.Second,
	SendTimeout:      60 * time.Second,
}

// decodeConnections reads a listener's connections section.
func decodeConnections(o *conf.Obj) Connections {
	d := defaultConnections
	c := Connections{
		Max:              int(o.Int("max", int64(d.Max), 0, 1<<24)),
		KeepaliveTimeout: duration(o, "keepalive_timeout", d.KeepaliveTimeout, 0, 24*time.Hour),
		HeaderTimeout:    duration(o, "header_timeout", d.HeaderTimeout, time.Millisecond, 24*time.Hour),
		BodyTimeout:      duration(o, "body_timeout", d.BodyTimeout, time.Millisecond, 24*time.Hour),
		SendTimeout:      duration(o, "send_timeout", d.SendTimeout, time.Millisecond, 24*time.Hour),
	}
	o.Done()
	return c
}

// loopback reports whether a listener's address (listen's form) listens on loopback only:
// localhost or a loopback IP. An empty host, 0.0.0.0 and [::] are every interface; any other
// name may resolve to anything.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// secret reads the secret field of o: written in the config; or in the file fileField names
// (the convention of Docker and Kubernetes secrets; a final newline is dropped), read again at
// every reload; or, when neither is set, in the environment variable env. Its value never
// appears in an error or a log line.
func secret(o *conf.Obj, field, fileField, env string) string {
	v := o.String(field, "")
	file := o.String(fileField, "")
	switch {
	case v != "" && file != "":
		o.Fail(fileField, "cannot be set with "+field+": give the secret one way")
	case file != "":
		b, err := config.ReadRegular(file, config.MaxSecret)
		switch {
		case err != nil:
			o.Fail(fileField, "cannot be read: "+err.Error())
		default:
			v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if v == "" {
				o.Fail(fileField, "is empty")
			}
		}
	case v == "":
		v = os.Getenv(env)
	}
	return v
}

func decodeRedis(o *conf.Obj) *stack.Redis {
	var r stack.Redis
	o.Require("addrs")
	r.Addrs = o.StringsMatching("addrs", redisAddr, "host:port with a port from 1 to 65535")
	if o.Has("addrs") && len(r.Addrs) == 0 {
		o.Fail("addrs", "needs at least one host:port")
	}
	r.MasterName = o.String("master_name", "")
	r.Username = o.String("username", "")
	r.Password = secret(o, "password", "password_file", "DIANA_REDIS_PASSWORD")
	r.DB = int(o.Int("db", 0, 0, stack.MaxDB))
	r.TLS = o.Bool("tls", false)
	r.ServerName = o.String("tls_server_name", "")
	r.SkipVerify = o.Bool("tls_skip_verify", false)
	r.CAFile, r.CertFile, r.KeyFile = o.String("tls_ca_file", ""), o.String("tls_cert_file", ""), o.String("tls_key_file", "")
	r.ReadFiles(func(f stack.TLSFile, err error) {
		o.Fail([...]string{stack.CAFile: "tls_ca_file", stack.CertFile: "tls_cert_file", stack.KeyFile: "tls_key_file"}[f], "cannot be read: "+err.Error())
	})
	if r.CACert != nil {
		if _, err := (redisstore.Conn{TLS: true, CACert: r.CACert}).TLSConfig(); err != nil {
			o.Fail("tls_ca_file", "holds no PEM certificate (want -----BEGIN CERTIFICATE----- blocks)")
		}
	}
	switch {
	case (r.ClientCert == nil) != (r.ClientKey == nil) && !o.Failed("tls_cert_file", "tls_key_file"):
		o.Fail("tls_key_file", "tls_cert_file and tls_key_file go together: the client certificate and its key")
	case r.ClientCert != nil && r.ClientKey != nil:
		if _, err := tls.X509KeyPair(r.ClientCert, r.ClientKey); err != nil {
			o.Fail("tls_key_file", "is not the key of tls_cert_file's certificate, or either is not PEM: "+err.Error())
		}
	}
	if !r.TLS {
		for f, set := range map[string]bool{"tls_ca_file": r.CACert != nil, "tls_server_name": r.ServerName != "", "tls_skip_verify": r.SkipVerify,
			"tls_cert_file": r.ClientCert != nil, "tls_key_file": r.ClientKey != nil} {
			if set {
				o.Fail(f, "applies only with tls: true")
			}
		}
	}
	r.Cluster = o.Bool("cluster", false)
	r.Wait = int(o.Int("wait_replicas", 0, 0, stack.MaxWait))
	r.Conflicts(false, func(c stack.Conflict) {
		switch c {
		case stack.ClusterWithSentinel:
			o.Fail("cluster", "cannot be combined with master_name (Sentinel)")
		case stack.WaitOnCluster:
			o.Fail("wait_replicas", "cannot be used with a Redis Cluster (WAIT has no key to be routed by); use it with a standalone or Sentinel master")
		}
	})
	r.Timeout = duration(o, "timeout", stack.DefaultTimeout, stack.MinTimeout, stack.MaxTimeout)
	r.Prefix = o.String("prefix", stack.DefaultPrefix)
	r.Failures = int(o.Int("breaker_failures", stack.DefaultFailures, 1, stack.MaxFailures))
	r.OpenFor = duration(o, "breaker_open_for", stack.DefaultOpenFor, stack.MinOpenFor, stack.MaxOpenFor)
	o.Done()
	return &r
}

// duration reads a duration field into a time.Duration: def if absent, between min and max.
func duration(o *conf.Obj, key string, def, min, max time.Duration) time.Duration {
	return time.Duration(o.Duration(key, def.Microseconds(), min.Microseconds(), max.Microseconds())) * time.Microsecond
}

func decodeRLS(o *conf.Obj, redis bool) *RLS {
	r := &RLS{}
	o.Require("listen", "config_dir")
	r.Listen = listen(o, "")
	if o.Has("listen") && r.Listen == "" {
		o.Fail("listen", "cannot be empty: the rate limit service needs an address (remove the rls section to run none)")
	}
	r.ConfigDir = o.String("config_dir", "")
	if o.Has("config_dir") && r.ConfigDir == "" {
		o.Fail("config_dir", "cannot be empty")
	}
	r.Mode = rules.Mode(o.EnumIndex("mode", rules.ModeNames[:]...))
	if r.Mode == rules.Cluster && !redis {
		o.Fail("mode", "cluster mode needs the redis section")
	}
	r.OnError = rules.FailPolicy(o.EnumIndex("on_error", rules.FailPolicyNames[:]...))
	r.Nodes = o.Int("nodes", 1, 1, 10000)
	if r.Mode == rules.Local && o.Has("on_error") {
		o.Fail("on_error", "applies only to mode cluster")
	}
	if r.OnError != rules.FailLocal && o.Has("nodes") {
		o.Fail("nodes", "applies only with on_error local")
	}
	r.Headers = o.Bool("response_headers", false)
	r.Metadata = o.Bool("response_dynamic_metadata", false)
	r.QuotaMode = o.Bool("quota_mode", false)
	r.Shadow = o.Bool("shadow_mode", false)
	r.Merge = o.Bool("merge_domain_config", false)
	r.Quota = decodeQuota(o.Obj("quota"))
	r.Connections = decodeGRPCConnections(o.Obj("connections"))
	o.Done()
	return r
}

// decodeGRPCConnections reads the rate limit service's connections section (grpcconns.go).
func decodeGRPCConnections(o *conf.Obj) GRPCConnections {
	d := defaultGRPCConnections
	c := GRPCConnections{
		Max:              int(o.Int("max", int64(d.Max), 0, 1<<24)),
		KeepaliveTimeout: duration(o, "keepalive_timeout", d.KeepaliveTimeout, time.Second, 24*time.Hour),
		HeaderTimeout:    duration(o, "header_timeout", d.HeaderTimeout, time.Millisecond, 24*time.Hour),
		MaxStreams:       int(o.Int("max_streams", int64(d.MaxStreams), 1, 1<<20)),
		MaxHeaderBytes:   int(o.Int("max_header_bytes", int64(d.MaxHeaderBytes), 4<<10, 16<<20)),
	}
	o.Done()
	return c
}

func decodeQuota(o *conf.Obj) Quota {
	q := Quota{
		MaxBucketsPerStream: int(o.Int("max_buckets_per_stream", rlqs.DefaultMaxBucketsPerStream, 1, 1<<20)),
		MaxBuckets:          int(o.Int("max_buckets", rlqs.DefaultMaxBuckets, 1, 1<<24)),
		MaxStreams:          int(o.Int("max_streams", rlqs.DefaultMaxStreams, 1, 1<<20)),
		AssignmentTTL:       duration(o, "assignment_ttl", rlqs.DefaultAssignmentTTL, time.Second, time.Hour),
	}
	if q.AssignmentTTL%time.Second != 0 {
		o.Fail("assignment_ttl", "must be whole seconds: Envoy reads no fraction of assignment_time_to_live")
	}
	o.Done()
	return q
}

func quote(s string) string { return strconv.Quote(s) }
