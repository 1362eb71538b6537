package server

import (
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// Parse reads a config document (YAML or JSON, see config.Decode) named name, as dianad reads
// its config file: every error names the field and the reason. With an rls section, it reads
// the descriptor config files of rls.config_dir too, whose errors name the file and the field.
func Parse(data []byte, name string) (*Config, error) {
	doc, err := config.Decode(data, name)
	if err != nil {
		return nil, err
	}
	c, err := Decode(doc, name, false)
	if err != nil {
		return nil, err
	}
	if c.RLS != nil {
		if _, _, err := readRLS(c.RLS); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// reloadState is what the loader's callbacks know; they run one at a time, but the mutex keeps
// that true whatever the loader does.
type reloadState struct {
	mu      sync.Mutex
	file    *Config           // the file's last valid config (nil: none read yet)
	from    string            // where the applied rules came from
	remote  []*rules.Rule     // the remote's rules, while they apply
	lastErr map[string]string // each source's last reported error, to log a lasting one once
}

// newLoader sets up the config loader of the file and the remote source.
func (s *Server) newLoader() {
	c := s.cfg
	o := config.Options[*Config]{
		File:     s.opts.File,
		Parse:    s.parse,
		Apply:    s.apply,
		Report:   s.report,
		Interval: c.Remote.Interval,
	}
	switch {
	case c.Remote.URL != "":
		h := http.Header{}
		for k, v := range c.Remote.Headers {
			h.Set(k, v)
		}
		o.Remote = &config.HTTP{URL: c.Remote.URL, Header: h}
	case c.Remote.RedisKey != "" && s.rdb != nil:
		o.Remote = &config.Redis{Client: s.rdb, Key: c.Remote.RedisKey, Channel: c.Remote.RedisChannel}
	}
	if o.Remote != nil {
		s.remoteName = o.Remote.Name()
	}
	s.reloads.file = nil
	s.reloads.from = s.initialSource()
	s.reloads.lastErr = map[string]string{}
	s.loader = config.NewLoader(o)
}

// initialSource names where the config given to New came from, as the loader names sources.
func (s *Server) initialSource() string {
	if s.opts.File != "" {
		return "file " + s.opts.File
	}
	return "embedded"
}

// sourceKind is the kind of a source name ("file PATH" → "file"), the metrics' label.
func sourceKind(from string) string {
	kind, _, _ := strings.Cut(from, " ")
	return kind
}

// parse validates a document for the loader. A remote document holds only rules; rules in
// cluster mode need the Redis client, which only a restart can add.
func (s *Server) parse(doc conf.Value, name string) (*Config, error) {
	remote := s.remoteName != "" && name == s.remoteName
	c, err := Decode(doc, name, remote)
	if err != nil {
		return nil, err
	}
	if s.cluster == nil {
		errs := &conf.Errors{Source: name}
		for i, r := range c.Rules {
			if r.Mode == rules.Cluster {
				errs.Add("rules["+strconv.Itoa(i)+"].mode", "cluster mode needs Redis, and this dianad started without the redis section: restart it to connect")
			}
		}
		if err := errs.Err(); err != nil {
			return nil, err
		}
	}
	if !remote {
		s.reloads.mu.Lock()
		s.reloads.file = c
		s.reloads.mu.Unlock()
	}
	return c, nil
}

// apply makes cfg, from the file or the remote source, the running config. The remote's rules
// run with the file's other settings.
func (s *Server) apply(cfg *Config, from string) {
	st := &s.reloads
	st.mu.Lock()
	defer st.mu.Unlock()
	eff := cfg
	if from == s.remoteName {
		eff = s.withRules(cfg.Rules)
		st.remote = cfg.Rules
	} else {
		s.logRestartNeeded(cfg)
		st.remote = nil
	}
	if err := s.setLive(eff); err != nil {
		s.log.Error("config: cannot apply, keeping the running one", "from", from, "err", err)
		return
	}
	st.from = from
	s.met.configInfo(sourceKind(from))
	s.log.Info("config applied", "from", from, "rules", len(eff.Rules), "upstreams", len(eff.Upstreams))
}

// withRules returns the file's settings (the startup config's without a valid file) with rs.
// st.mu must be held.
func (s *Server) withRules(rs []*rules.Rule) *Config {
	base := s.reloads.file
	if base == nil {
		base = s.cfg
	}
	c := *base
	c.Rules = rs
	return &c
}

// report is told the outcome of every attempt to read a source.
func (s *Server) report(from string, err error) {
	s.met.reload(sourceKind(from), err)
	st := &s.reloads
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		msg := err.Error()
		if st.lastErr[from] == msg {
			s.log.Debug("config source still failing", "from", from, "err", err)
			return
		}
		st.lastErr[from] = msg
		if errors.Is(err, config.ErrNoConfig) || from == s.remoteName {
			s.log.Warn("config: remote source unavailable or invalid; its last valid document applies (the file's until it has sent one)", "from", from, "err", err)
		} else {
			s.log.Warn("config: invalid or unreadable, keeping the last valid config", "from", from, "err", err)
		}
		return
	}
	delete(st.lastErr, from)
	s.log.Info("config read", "from", from)
	// A new file while the remote's rules apply: the loader keeps the remote's config, but the
	// file's other settings (upstreams, trusted proxies, ...) take effect now.
	if from != s.remoteName && st.from == s.remoteName && st.remote != nil && st.file != nil {
		s.logRestartNeeded(st.file)
		if err := s.setLive(s.withRules(st.remote)); err != nil {
			s.log.Error("config: cannot apply the file's settings", "from", from, "err", err)
		}
	}
}

// logRestartNeeded warns about the settings of c that differ from the running ones but take
// effect only after a restart.
func (s *Server) logRestartNeeded(c *Config) {
	changed := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			s.log.Warn("config: setting changed; it takes effect only after a restart", "setting", name)
		}
	}
	changed("listen", s.cfg.Listen, c.Listen)
	changed("connections", s.cfg.Connections, c.Connections)
	changed("admin", s.cfg.Admin, c.Admin)
	changed("local_store", s.cfg.LocalStore, c.LocalStore)
	changed("redis", s.cfg.Redis, c.Redis)
	changed("remote", s.cfg.Remote, c.Remote)
	changed("rls", s.cfg.RLS, c.RLS)
}

// setLive builds the engine, the request options and the upstreams of c and swaps them in at
// once; requests in flight finish with the snapshot they started with.
func (s *Server) setLive(c *Config) error {
	ro := rules.Options{Local: rules.Each(s.mem.Decide), Observe: s.observe, Limit: s.met.adaptiveLimit, Settled: s.settled,
		EscapedSlashes: c.EscapedSlashes, StripDotsSpaces: c.StripDots}
	if s.cluster != nil {
		ro.Cluster = s.cluster // never a typed nil: rules.New must see a missing store
	}
	e, err := rules.New(c.Rules, ro)
	if err != nil {
		return err
	}
	for i, r := range c.Rules {
		for _, w := range r.Warnings("rules[" + strconv.Itoa(i) + "]") {
			s.log.Warn("config: "+w.Reason, "field", w.Path, "rule", r.Name)
		}
	}
	ups := make([]*upstream, len(c.Upstreams))
	for i, u := range c.Upstreams {
		ups[i] = s.newUpstream(u)
	}
	l := &live{
		engine: e,
		opts: httplimit.Options{
			TrustedProxies: c.TrustedProxies,
			ClientIPHeader: c.ClientIPHeader,
			AddressHeader:  s.addressHeader,
			IPv6Prefix:     c.IPv6Prefix,
			ConsumerHeader: c.ConsumerHeader,
			Denied:         func(_ *http.Request, in *rules.Input, res *rules.Result) { s.logDenial(in, res) },
		},
		upstreams: ups,
		accessLog: c.AccessLog,
	}
	for _, r := range c.Rules {
		if r.Mode == rules.Cluster {
			s.met.backendErrors.WithLabelValues(r.Name) // shown as 0 from the start, for alerts
		}
	}
	s.live.Store(l)
	return nil
}
