package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Kong/go-pdk"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
)

// Config is one plugin instance, as go-pdk makes it for each nginx worker: Kong's config JSON
// decoded into rules and an engine. It holds no counts (see stores.go), and never changes after
// it is decoded, so concurrent events can share it.
//
// Its fields are unexported on purpose: go-pdk reflects on the config type only for its own
// -dump, which main replaces.
type Config struct {
	s          *settings
	engine     *rules.Engine
	err        error // the config is invalid: see invalid
	failClosed bool  // the invalid config says fail_closed: true; its requests are refused

	// Kong's error log for the paths where a request passes unlimited (and an invalid config),
	// at most a line a second of each per instance (logs.go).
	log *slog.Logger
}

// New makes an empty instance for go-pdk, which then decodes Kong's config JSON into it.
func New() any { return &Config{log: newLog()} }

// UnmarshalJSON decodes and validates the config. It never fails: a failure makes Kong answer
// 500 to every request, whereas an invalid config here is reported once in Kong's error log
// and the instance lets requests through (fail open), or refuses them with fail_closed, logging
// through the PDK while requests come (see invalid).
func (c *Config) UnmarshalJSON(b []byte) error {
	defer func() {
		if r := recover(); r != nil {
			c.s, c.engine = nil, nil
			c.err = fmt.Errorf("panic while decoding the config: %v", r)
			report("", c.err)
		}
	}()
	s, err := parse(b, false)
	if err == nil {
		c.engine, err = rules.New(s.Rules, rules.Options{Local: local, Cluster: clusterStore(s.Redis), EscapedSlashes: s.Path.Slashes, StripDotsSpaces: s.Path.StripDotsSpaces})
	}
	if err != nil {
		c.err = err
		c.failClosed = saysFailClosed(b)
		id := ""
		if s != nil {
			id = s.PluginID
		}
		report(id, err)
		return nil
	}
	for _, w := range s.Warnings {
		warnOnce(s.PluginID, w)
	}
	c.s = s
	return nil
}

// saysFailClosed reads fail_closed from a config that did not decode: true only if it is there
// and true.
func saysFailClosed(b []byte) bool {
	doc, err := conf.ParseJSON(b)
	if err != nil {
		return false
	}
	o, ok := doc.(*conf.Object)
	if !ok {
		return false
	}
	v, _ := o.Get("fail_closed")
	return v == true
}

// parse reads a config JSON document.
func parse(b []byte, strict bool) (*settings, error) {
	doc, err := conf.ParseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("config JSON: %w", err)
	}
	return decode(doc, strict)
}

// reported holds the errors already logged, so that each worker's copy of an invalid config
// (and each restart of an instance) does not log it again.
var reported sync.Map

func report(pluginID string, err error) {
	msg := err.Error()
	if _, dup := reported.LoadOrStore(pluginID+"\x00"+msg, true); dup {
		return
	}
	log.Printf("diana: plugin %s: invalid config, requests pass unlimited until it is fixed:\n%s", pluginID, msg)
}

// warnOnce logs, once per plugin and message, where a valid config is taken otherwise than
// written (a field that does not apply, ignored; a value lowered to what the algorithm holds).
// Kong writes the plugin server's standard error to its error log.
func warnOnce(pluginID, msg string) {
	if _, dup := reported.LoadOrStore(pluginID+"\x00"+msg, true); dup {
		return
	}
	log.Printf("diana: plugin %s: warning: %s", pluginID, msg)
}

// recovered logs a panic of an event handler: go-pdk has no recover, and a panic would kill
// the plugin process, and with it every Go plugin request of the node.
func recovered(event string) {
	if r := recover(); r != nil {
		panicLog.Error("diana: panic in {event} (request let through; {suppressed} more since the last line): {panic}\n{stack}",
			"event", event, "panic", r, "stack", string(debug.Stack()))
	}
}

// panicLog writes the panic lines on standard error, one a second at most: a panic on every
// request must not flood Kong's log.
var panicLog = newLog()

// Access decides the request. On the allowed path of a per-IP limit it makes two PDK calls:
// Client.GetForwardedIp and one Response.SetHeaders (none with hide_client_headers). A denial
// is one Response.Exit with the JSON body and the headers. Other limits ask Kong only for what
// they count by (consumer, credential, path, header, service).
func (c *Config) Access(kong *pdk.PDK) {
	defer recovered("access")
	if c.engine == nil {
		c.invalid(kong)
		return
	}
	in, ok := c.input(kong)
	if !ok { // Kong did not answer: let the request through rather than guess, and say so
		c.log.LogAttrs(context.Background(), slog.LevelWarn, // on standard error: the PDK failed
			"diana: plugin {plugin}: Kong did not give the client address, request let through unlimited ({suppressed} more since the last line)",
			slog.String("plugin", c.s.PluginID))
		return
	}
	res := c.engine.Check(context.Background(), &in)
	c.logUnlimited(kong, &in, &res)
	h := map[string][]string{}
	httplimit.SetHeaders(http.Header(h), &res)
	if !res.Allowed {
		c.engine.Release(context.Background(), &res) // leases of a racing commit: the request ends here
		status, body := res.Denial()
		h["Content-Type"] = []string{"application/json; charset=utf-8"}
		kong.Response.Exit(status, body, h)
		return
	}
	if res.HasLeases() || res.Settles() {
		id := strconv.FormatUint(leaseSeq.Add(1), 10)
		leases.Store(id, held{c.engine, res, clock()})
		if err := kong.Ctx.SetShared(leaseKey, id); err != nil {
			leases.Delete(id)
			c.engine.Release(context.Background(), &res)
			c.engine.Settle(context.Background(), &res, unread) // the log phase cannot find it: its fallback now
		}
	}
	if len(h) > 0 {
		kong.Response.SetHeaders(h)
	}
}

// invalid answers a request of an instance whose config is invalid (which Kong's schema should
// have refused): an error in Kong's log, and the request refused with 503 under fail_closed,
// else let through.
func (c *Config) invalid(kong *pdk.PDK) {
	what := "let through unlimited"
	if c.failClosed {
		what = "refused (fail_closed)"
	}
	c.log.LogAttrs(pdkCtx{kong}, slog.LevelError, "diana: invalid config, requests are {what} ({suppressed} more since the last line): {err}",
		slog.String("what", what), slog.Any("err", c.err))
	if c.failClosed {
		kong.Response.Exit(http.StatusServiceUnavailable, rules.DenialBody("rate limit configuration invalid", -1),
			map[string][]string{"Content-Type": {"application/json; charset=utf-8"}})
	}
}

// logUnlimited logs, in Kong's error log, a request that a shadow rule would have denied and
// one decided by a fail policy because Redis could not decide: the rule, the client, the reason.
func (c *Config) logUnlimited(kong *pdk.PDK, in *rules.Input, res *rules.Result) {
	client := in.ClientName()
	if r := res.Shadow; r != nil {
		c.log.LogAttrs(pdkCtx{kong}, slog.LevelWarn, "diana: shadow rule {rule} would deny client {client} ({suppressed} more since the last line)",
			slog.String("rule", r.Name), slog.String("client", client))
	}
	if r := res.ErrRule; res.Err != nil && r != nil {
		c.log.LogAttrs(pdkCtx{kong}, slog.LevelError,
			"diana: Redis could not decide rule {rule} for client {client}, on_error {on_error} applied ({suppressed} more since the last line): {err}",
			slog.String("rule", r.Name), slog.String("client", client), slog.String("on_error", r.OnError.String()), slog.Any("err", res.Err))
	}
}

// Log gives back the concurrency leases the request took, with the time from the end of its
// access phase to its log phase as its latency (the upstream call and the response to the
// client), which adaptive limits learn from: no PDK call measures it. For adaptive limits it
// also asks the response's status: one ≥ 500 (the upstream's, or Kong's 502 or 504 when the
// upstream failed or timed out) is a drop, which cuts the limit. Instances without a
// concurrency or adaptive limit return at once, without a PDK call.
func (c *Config) Log(kong *pdk.PDK) {
	defer recovered("log")
	if c.engine == nil || !c.s.needs.Leases && !c.s.needs.Settles {
		return
	}
	id, err := kong.Ctx.GetSharedString(leaseKey)
	if err != nil || id == "" {
		return
	}
	if v, ok := leases.LoadAndDelete(id); ok {
		h := v.(held)
		latency := max(clock().Sub(h.start).Microseconds(), 1) // before the PDK call below
		dropped := false
		if h.res.Learns() {
			status, err := kong.Response.GetStatus()
			dropped = err == nil && rules.Dropped(status)
		}
		h.engine.Finish(context.Background(), &h.res, latency, dropped)
		if h.res.Settles() {
			c.settle(kong, &h)
		}
	}
}

// settle charges the usage rules of a request the cost its upstream's response header gives
// (usage_header), read in the log phase, when the response has ended: one PDK call. A response
// without it (no response from the service, the header missing or unreadable) is charged
// usage_fallback, and logged at most once a second.
func (c *Config) settle(kong *pdk.PDK, h *held) {
	m := h.res.Meter(usage.Limits{})
	if hs, err := kong.ServiceResponse.GetHeaders(-1); err == nil && hs != nil {
		m.Header(func(name string) []string {
			for k, v := range hs {
				if strings.EqualFold(k, name) {
					return v
				}
			}
			return nil
		})
	}
	var why error
	h.engine.Settle(context.Background(), &h.res, func(r *rules.Rule) (int64, error) {
		n, err := m.Cost(r)
		if err != nil && why == nil {
			why = err
		}
		return n, err
	})
	if why != nil {
		c.log.LogAttrs(pdkCtx{kong}, slog.LevelWarn, "diana: plugin {plugin}: response usage unread, charged usage_fallback ({suppressed} more since the last line): {err}",
			slog.String("plugin", c.s.PluginID), slog.Any("err", why))
	}
}

// unread is the cost of a response whose usage was never read.
func unread(*rules.Rule) (int64, error) { return 0, errUnread }

var errUnread = fmt.Errorf("%w: the log phase did not find the request", usage.ErrMissing)

// Leases and usage reservations held by requests in flight, from Access to Log, by an id kept
// in kong.ctx.shared.
var (
	leaseSeq atomic.Uint64
	leases   sync.Map // id → held
)

// The ids start at a random number: when Kong restarts a plugin server that died, the requests
// the dead one admitted still reach their log phase with its ids, and one of them must not find
// a request of this process (settling it with the other's response, or giving back the lease of
// a request still running).
func init() { leaseSeq.Store(rand.Uint64()) }

const leaseKey = "diana_lease"

type held struct {
	engine *rules.Engine
	res    rules.Result
	start  time.Time // the end of the access phase
}

// clock is time.Now; tests set it to give requests the latency they need.
var clock = time.Now

// input asks Kong for what the rules count by, and nothing else. The client address comes last,
// and only when a rule reads it: it counts by ip, or a value it counts by is missing (a request
// without a consumer counts by its address).
func (c *Config) input(kong *pdk.PDK) (rules.Input, bool) {
	n := &c.s.needs
	in := rules.Input{}
	if n.Consumer {
		if cons, err := kong.Client.GetConsumer(); err == nil {
			in.Consumer = cons.Id
		}
	}
	if n.Path {
		if p, err := kong.Request.GetPath(); err == nil {
			in.Path = p
		}
	}
	if n.Service {
		in.Route = c.s.ServiceID
		if in.Route == "" { // a global or per-route instance: ask which service matched
			if svc, err := kong.Router.GetService(); err == nil {
				in.Route = svc.Id
			}
		}
	}
	if n.Headers || n.Credential {
		h := &pdkHeaders{kong: kong}
		if n.Credential {
			if cred, err := kong.Client.GetCredential(); err == nil {
				h.credential = cred.Id
			}
		}
		if n.Identity { // every header at once: the rules refuse an identity header given twice
			h.fetch()
		}
		in.Headers = h
	}
	if n.IP && slices.ContainsFunc(c.s.Rules, func(r *rules.Rule) bool { return r.ReadsAddr(&in) }) {
		ip, err := kong.Client.GetForwardedIp()
		if err != nil {
			return in, false
		}
		a, _ := netip.ParseAddr(ip)
		in.SetClient(a, 64)
	}
	return in, true
}

// pdkHeaders gives the rules the request headers they read, one PDK call per header however
// often it is read, and the credential id under credentialHeader. It is rules.MultiHeaders:
// Kong's get_header gives a header's first value only, so Values asks for every header at once
// (one call, which Get then reads from too), and a header the rules count by, given twice, is
// refused.
type pdkHeaders struct {
	kong       *pdk.PDK
	credential string
	read       [][2]string         // the headers asked for so far, name and value
	all        map[string][]string // every header, by lower-case name, once Values asked Kong
	truncated  bool                // the request has maxHeaders header lines or more
}

// maxHeaders is the most header lines Kong's get_headers gives (its own upper bound).
const maxHeaders = 1000

func (h *pdkHeaders) Get(name string) string {
	if name == credentialHeader {
		return h.credential
	}
	if h.all != nil {
		if vs := h.all[strings.ToLower(name)]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	for _, kv := range h.read {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	v, err := h.kong.Request.GetHeader(name)
	if err != nil {
		v = ""
	}
	h.read = append(h.read, [2]string{name, v})
	return v
}

// fetch asks Kong for every header of the request, once.
func (h *pdkHeaders) fetch() {
	if h.all != nil {
		return
	}
	all, err := h.kong.Request.GetHeaders(maxHeaders)
	if err != nil || all == nil {
		all = map[string][]string{}
	}
	h.all = make(map[string][]string, len(all))
	n := 0
	for k, vs := range all {
		h.all[strings.ToLower(k)] = append(h.all[strings.ToLower(k)], vs...)
		n += len(vs)
	}
	h.truncated = n >= maxHeaders
}

// Values returns every value of a header. A request with maxHeaders header lines or more may
// have been cut short by Kong: it counts as giving the header twice (it cannot be told once).
func (h *pdkHeaders) Values(name string) []string {
	if name == credentialHeader {
		if h.credential == "" {
			return nil
		}
		return []string{h.credential}
	}
	h.fetch()
	vs := h.all[strings.ToLower(name)]
	if h.truncated {
		return append(vs, "", "")
	}
	return vs
}
