// Command wasmfilter is diana.wasm, Diana's Envoy filter (proxy-wasm, built with TinyGo):
//
//	TINYGO=$(build/tinygo.sh) && "$TINYGO" build -o bin/diana.wasm -scheduler=none \
//	    -target=wasip1 -buildmode=wasi-legacy -no-debug ./wasmfilter
//
// or make wasm. It decides each request against the rules of its plugin configuration (a JSON
// StringValue, see docs/envoy.md): local rules in Envoy's shared data, node-wide across the
// worker threads of one vm_id, and, in cluster mode, dianad's rules through POST /v1/check on an
// Envoy cluster. A denied request gets a local reply (the rule's status, 429 by default) with a
// JSON body and the rate-limit headers; an allowed one gets the headers on its response.
//
// TinyGo has no recover: nothing here may panic on any input.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/diana-gw/diana/store/slotstore"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() { proxywasm.SetVMContext(&vmContext{}) }

// vmContext is the VM. Its fields are for tests; zero values use the host.
type vmContext struct {
	types.DefaultVMContext
	data   slotstore.Data // nil: the host's shared data
	now    func() int64   // µs; nil: time.Now
	status func() string  // the response's :status; nil: the host's
}

func (vm *vmContext) NewPluginContext(id uint32) types.PluginContext {
	p := &pluginContext{id: id, data: vm.data, now: vm.now, status: vm.status}
	if p.data == nil {
		p.data = hostData{}
	}
	if p.now == nil {
		p.now = func() int64 { return time.Now().UnixMicro() }
	}
	if p.status == nil {
		p.status = responseStatus
	}
	return p
}

// readRandom fills b from the host's randomness (WASI random_get under Envoy).
func readRandom(b []byte) error {
	_, err := rand.Read(b)
	return err
}

// Metric names; Envoy prefixes them with "wasmcustom.".
const (
	metricAllowed      = "diana.allowed"       // requests let through (shadow denials included)
	metricDenied       = "diana.denied"        // requests refused with a local reply
	metricShadowDenied = "diana.shadow_denied" // requests a shadow rule would have refused
	metricUnlimited    = "diana.unlimited"     // requests an unlimited rule exempted from every rule (counted in allowed too)
	metricBackendError = "diana.backend_errors"
	metricCASExhausted = "diana.cas_retries_exhausted" // requests denied as their slot changed under every retry
	metricOverflow     = "diana.slot_overflows"        // decisions on a slot's overflow state: its entries were all live
	metricDataErrors   = "diana.shared_data_errors"    // requests a rule let through because shared data failed
	metricHeap         = "diana.heap_bytes"            // gauge: this VM's heap, updated every tick
	metricNotEnabled   = "diana.not_enabled"           // requests filter_enabled left out: let through undecided (counted in allowed too)
	metricNotEnforced  = "diana.not_enforced"          // denials filter_enforced did not answer (counted in shadow_denied too)
	metricUsageUnread  = "diana.usage_unread"          // responses whose usage could not be read: charged the rule's fallback
	metricSettleFailed = "diana.settle_failed"         // settlements of dianad's usage rules that dianad did not take: the estimate stays charged
)

// tickMS is how often each VM updates its heap gauge and rereads the hash key.
const tickMS = 10_000

type metrics struct {
	allowed, denied, shadowDenied, unlimited, backendErrors, casExhausted, overflow, dataErrors proxywasm.MetricCounter
	notEnabled, notEnforced, usageUnread, settleFailed                                          proxywasm.MetricCounter
	heap                                                                                        proxywasm.MetricGauge
}

// pluginContext is one filter configuration.
type pluginContext struct {
	types.DefaultPluginContext
	id     uint32 // the plugin (root) context's id: settlements are sent from it (usage.go)
	data   slotstore.Data
	now    func() int64
	status func() string

	cfg      *config
	store    *slotstore.Store
	local    *rules.Engine // cfg.rules; nil when there are none
	fallback *rules.Engine // cfg.cluster.rules, for on_failure: local
	m        metrics
	heap     int64 // the heap gauge's value

	// Logs of events that a flood could repeat: failed callouts, local replies the host
	// refused, shadow denials, shared-data failures, requests filter_enabled left out.
	callouts, replies, shadows, dataLog, notEnabled, usageLog, settleLog summary
	sample                                                               sampler // filter_enabled and filter_enforced
}

// OnPluginStart parses and validates the configuration; a bad one fails the start (Envoy then
// refuses the listener or the update), with a critical log line naming each invalid field.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, ok := readConfiguration()
	if !ok {
		return types.OnPluginStartStatusFailed
	}
	p.m = defineMetrics()
	if err := proxywasm.SetTickPeriodMilliSeconds(tickMS); err != nil {
		proxywasm.LogWarn("diana.wasm: no ticks, the heap gauge stays 0: " + err.Error())
	}
	key, err := slotstore.LoadKey(p.data, readRandom)
	if err != nil {
		proxywasm.LogCritical("diana.wasm: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	store := &slotstore.Store{Data: p.data, Now: p.now, Key: key, Slots: cfg.slots, Entries: cfg.slotEntries, Retries: cfg.casRetries,
		Contended:  func() { p.m.casExhausted.Increment(1) },
		Overflowed: func() { p.m.overflow.Increment(1) }}
	p.store = store
	p.nameSummaries(cfg)
	var seed [8]byte
	if err := readRandom(seed[:]); err != nil {
		proxywasm.LogCritical("diana.wasm: no randomness for filter_enabled and filter_enforced: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	p.sample.x = binary.LittleEndian.Uint64(seed[:]) | 1 // xorshift needs a state other than 0
	if cfg.enabled < million || cfg.enforced < million {
		proxywasm.LogWarn("diana.wasm: filter_enabled " + percent(cfg.enabled) + ", filter_enforced " + percent(cfg.enforced) +
			": the other requests pass undecided (diana.not_enabled) or undenied (diana.not_enforced, logged as shadow denials)")
	}
	if !p.newEngines(cfg, store) {
		return types.OnPluginStartStatusFailed
	}
	p.cfg = cfg
	return types.OnPluginStartStatusOK
}

// readConfiguration reads and parses the plugin configuration; not ok (each reason logged,
// critical) if there is none or it is invalid.
func readConfiguration() (cfg *config, ok bool) {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogCritical("diana.wasm: reading the plugin configuration: " + err.Error())
		return nil, false
	}
	if len(data) == 0 {
		proxywasm.LogCritical("diana.wasm configuration: is empty: set configuration to a google.protobuf.StringValue holding the JSON config (see docs/envoy.md)")
		return nil, false
	}
	cfg, err = parseConfig(data)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			proxywasm.LogCritical(line)
		}
		return nil, false
	}
	return cfg, true
}

// defineMetrics defines the filter's metrics in the host.
func defineMetrics() metrics {
	return metrics{
		allowed:       proxywasm.DefineCounterMetric(metricAllowed),
		denied:        proxywasm.DefineCounterMetric(metricDenied),
		shadowDenied:  proxywasm.DefineCounterMetric(metricShadowDenied),
		unlimited:     proxywasm.DefineCounterMetric(metricUnlimited),
		backendErrors: proxywasm.DefineCounterMetric(metricBackendError),
		casExhausted:  proxywasm.DefineCounterMetric(metricCASExhausted),
		overflow:      proxywasm.DefineCounterMetric(metricOverflow),
		dataErrors:    proxywasm.DefineCounterMetric(metricDataErrors),
		heap:          proxywasm.DefineGaugeMetric(metricHeap),
		notEnabled:    proxywasm.DefineCounterMetric(metricNotEnabled),
		notEnforced:   proxywasm.DefineCounterMetric(metricNotEnforced),
		usageUnread:   proxywasm.DefineCounterMetric(metricUsageUnread),
		settleFailed:  proxywasm.DefineCounterMetric(metricSettleFailed),
	}
}

// nameSummaries names the kind of event each summary logs (logs.go).
func (p *pluginContext) nameSummaries(cfg *config) {
	p.callouts.what = "cluster mode: the callout to dianad failed"
	p.replies.what = "a local reply was refused by the host, the request went on"
	p.shadows.what = "shadow rule would have denied"
	p.dataLog.what = "shared data failed, the rule let the request through"
	p.usageLog.what = "a response's usage was unread, the rule's fallback charged"
	p.settleLog.what = "cluster mode: dianad did not take a usage settlement (the estimate stays charged)"
	p.notEnabled.what = "filter_enabled is " + percent(cfg.enabled) + ": a request was let through undecided"
}

// newEngines builds the engines of cfg's rules on store: the local rules', and cluster mode's
// fallback (on_failure: local); not ok (logged, critical) if the rules refuse the store.
func (p *pluginContext) newEngines(cfg *config, store *slotstore.Store) (ok bool) {
	var err error
	if len(cfg.rules) > 0 {
		var local rules.Store = store
		if keepsLists(cfg.rules) {
			local = &localStore{slots: store, states: &slotstore.States{Data: p.data, Now: p.now, Retries: cfg.casRetries, Contended: store.Contended}}
		}
		if p.local, err = rules.New(cfg.rules, rules.Options{Local: local, EscapedSlashes: cfg.path.Slashes, StripDotsSpaces: cfg.path.StripDotsSpaces,
			Settled: p.settled, Clock: p.now}); err != nil {
			proxywasm.LogCritical("diana.wasm configuration: " + err.Error())
			return false
		}
	}
	if cfg.cluster != nil && len(cfg.cluster.rules) > 0 {
		if p.fallback, err = rules.New(cfg.cluster.rules, rules.Options{Local: store, EscapedSlashes: cfg.path.Slashes, StripDotsSpaces: cfg.path.StripDotsSpaces}); err != nil {
			proxywasm.LogCritical("diana.wasm configuration: cluster: " + err.Error())
			return false
		}
	}
	return true
}

// OnTick records the heap's size (with TinyGo, the linear memory the VM has grown to) and
// rereads the hash key: workers that started at the same moment may have stored different ones,
// and the last stored wins.
func (p *pluginContext) OnTick() {
	p.callouts.tick(tickMS)
	p.replies.tick(tickMS)
	p.shadows.tick(tickMS)
	p.dataLog.tick(tickMS)
	p.notEnabled.tick(tickMS)
	p.usageLog.tick(tickMS)
	p.settleLog.tick(tickMS)
	if key, err := slotstore.LoadKey(p.data, readRandom); err == nil {
		p.store.Key = key
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.m.heap.Add(int64(ms.Sys) - p.heap)
	p.heap = int64(ms.Sys)
}

func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	return &httpContext{p: p, id: id}
}

// httpContext is one request.
type httpContext struct {
	types.DefaultHttpContext
	p       *pluginContext
	id      uint32      // the context's id
	addr    string      // the client address sent to dianad
	hdrs    [][2]string // rate-limit headers to add to the response
	replied bool        // a local reply was sent: its headers are already set
	shadow  string      // the shadow rule that would have denied the request
	paused  bool        // the request waits for the callout to dianad
	enforce bool        // a denial is answered (filter_enforced drew this request)

	headers reqHeaders   // what the rules read of the request's headers
	path    string       // the request's path, normalised, for dianad's usage rules
	body    *rules.Input // the request, while its body's first bytes are read (body.go)

	// askUsage: a rule reads the response in OpenAI's format (or, in cluster mode, dianad's may):
	// a streamed request that does not ask for its usage is made to, and strip takes the usage
	// back out of what the client receives.
	askUsage bool
	strip    *usage.UsageChunks

	held    *holding  // while the request holds leases (adaptive slots); nil otherwise
	metered *metering // while the request's response is metered for usage rules; nil otherwise
	remote  *remote   // likewise for dianad's usage rules (cluster mode)
}

// reqHeaders reads request headers from the host, only those the rules ask for, one host call
// each. It is rules.MultiHeaders: a header the rules count by, given twice, is refused. Envoy's
// host call for one header gives its first value only, so Values asks for every header at once
// (one call per request, which Get then reads from too).
type reqHeaders struct {
	all     [][2]string // every header, once Values asked the host
	fetched bool
}

func (r *reqHeaders) Get(name string) string {
	if r.fetched {
		for _, kv := range r.all {
			if strings.EqualFold(kv[0], name) {
				return kv[1]
			}
		}
		return ""
	}
	v, err := proxywasm.GetHttpRequestHeader(strings.ToLower(name))
	if err != nil {
		return ""
	}
	return v
}

// Values returns every value of a header.
func (r *reqHeaders) Values(name string) []string {
	if !r.fetched {
		r.all, _ = proxywasm.GetHttpRequestHeaders()
		r.fetched = true
	}
	var vs []string
	for _, kv := range r.all {
		if strings.EqualFold(kv[0], name) {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

func header(name string) string {
	v, _ := proxywasm.GetHttpRequestHeader(name)
	return v
}

// input is what the rules see of the request.
func (h *httpContext) input() rules.Input {
	cfg := h.p.cfg
	src, _ := proxywasm.GetProperty([]string{"source", "address"})
	var xff string
	if cfg.xffHops > 0 {
		xff = header("x-forwarded-for")
	}
	a := clientAddr(src, xff, cfg.xffHops)
	// Each part is a host call: only what the rules read (all of it in cluster mode).
	in := rules.Input{
		Path:    header(":path"), // as sent; the rules cut the query and normalise it
		Headers: &h.headers,
	}
	if cfg.reads.Method {
		in.Method = header(":method")
	}
	if cfg.reads.Host {
		in.Host = header(":authority")
	}
	in.SetClient(a, cfg.ipv6Prefix)
	if h.addr = in.ClientIP; in.Addr.Is6() { // an IPv4 address is its own client key: one string, not two
		h.addr = in.Addr.String()
	}
	if c := cfg.consumer; c != "" && cfg.reads.Consumer {
		vs := h.headers.Values(c)
		if len(vs) > 0 {
			in.Consumer = vs[0]
		}
		if len(vs) > 1 { // refused (rules.Input.Repeated)
			in.Repeated = c
		}
	}
	if cfg.reads.Route {
		if v, err := proxywasm.GetProperty([]string{"xds", "route_name"}); err == nil {
			in.Route = string(v)
		}
	}
	if cfg.reads.Body { // a usage rule reserves input by the body's size: the filter reads no body
		in.BodyLength, _ = strconv.ParseInt(header("content-length"), 10, 64)
	}
	return in
}

func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) types.Action {
	p := h.p
	if p.cfg == nil { // not started; Envoy does not create contexts then
		return types.ActionContinue
	}
	if !p.sample.take(p.cfg.enabled) {
		p.m.notEnabled.Increment(1)
		p.m.allowed.Increment(1)
		p.notEnabled.add("path " + strconv.Quote(header(":path")))
		return types.ActionContinue
	}
	h.enforce = p.sample.take(p.cfg.enforced)
	in := h.input()
	// The engines normalise the path too; doing it first sends dianad the same path.
	path, ok := p.cfg.path.Normal(in.Path)
	if !ok {
		return h.deny(&rules.Result{BadPath: true})
	}
	in.Path = path
	if in.Repeated != "" { // the consumer header twice: dianad would not be told
		return h.deny(&rules.Result{Repeated: in.Repeated})
	}
	if !endOfStream && h.readsBody(&in) {
		return h.waitBody(&in) // decided with the body's first bytes (body.go)
	}
	return h.decide(&in)
}

// decide decides the request the rules see as in: by the local rules, then by dianad's (a callout
// that pauses the request).
func (h *httpContext) decide(in *rules.Input) types.Action {
	p := h.p
	if p.local != nil {
		res := h.check(p.local, in)
		if res.HasLeases() { // allocated only then: requests without leases carry nothing more
			h.held = &holding{res: res}
		}
		h.meter(&res)
		h.askUsage = h.askUsage || res.ReadsFormat("openai")
		if !res.Allowed {
			return h.deny(&res)
		}
		if res.Unlimited != nil { // exempt from every rule, dianad's included: no callout
			p.m.unlimited.Increment(1)
			h.allow()
			return types.ActionContinue
		}
		h.hdrs = appendHeaders(h.hdrs[:0], &res)
	}
	if p.cfg.cluster != nil {
		return h.callout(in)
	}
	h.allow()
	return types.ActionContinue
}

// check decides in against e, noting whether a shadow rule would have denied it.
func (h *httpContext) check(e *rules.Engine, in *rules.Input) rules.Result {
	res := e.Check(context.Background(), in)
	if res.Shadow != nil {
		h.shadow = res.Shadow.Name
	}
	// A lost CAS race denies (cas_retries_exhausted counts it); any other failure of shared
	// data lets the request through that rule.
	if res.Err != nil && !errors.Is(res.Err, slotstore.ErrContended) {
		h.p.m.dataErrors.Increment(1)
		h.p.dataLog.add("rule " + strconv.Quote(res.ErrRule.Name) + ", client " + in.ClientName() + ": " + res.Err.Error())
	}
	return res
}

// allow counts an admitted request, and starts its latency.
func (h *httpContext) allow() {
	h.p.m.allowed.Increment(1)
	h.countShadow()
	if h.held != nil {
		h.held.sent, h.held.start = true, h.p.now()
	}
}

// countShadow counts and logs a shadow rule's would-be denial.
func (h *httpContext) countShadow() {
	if h.shadow != "" {
		h.p.m.shadowDenied.Increment(1)
		h.p.shadows.add("rule " + strconv.Quote(h.shadow) + ", client " + h.client())
	}
}

// client names the request's client for a log line.
func (h *httpContext) client() string {
	if h.addr == "" {
		return "(no address)"
	}
	return h.addr
}

// ratelimited marks a denial as Envoy's rate limit filters do: Envoy's router does not retry a
// request whose response carries it.
var ratelimited = [2]string{"x-envoy-ratelimited", "true"}

// deny answers a request the local rules refused.
func (h *httpContext) deny(res *rules.Result) types.Action {
	if !res.Invalid() && !h.enforced(ruleName(res.Rule)) {
		h.hdrs = appendHeaders(h.hdrs[:0], res)
		return h.pass()
	}
	status, body := res.Denial()
	hdrs := appendHeaders(make([][2]string, 0, 8), res)
	if !res.Invalid() {
		hdrs = append(hdrs, ratelimited)
	}
	return h.reply(status, hdrs, body)
}

// enforced reports whether a denial by the named rule is answered. When filter_enforced did not
// draw the request, it is not: it is counted and logged as a shadow rule's would-be denial, and
// the caller lets the request pass.
func (h *httpContext) enforced(rule string) bool {
	if h.enforce {
		return true
	}
	h.p.m.notEnforced.Increment(1)
	if h.shadow == "" {
		h.shadow = rule + " (not enforced: filter_enforced " + percent(h.p.cfg.enforced) + ")"
	}
	return false
}

func ruleName(r *rules.Rule) string {
	if r == nil {
		return "(none)"
	}
	return r.Name
}

// pass lets a request go on: at once, or by resuming it when it waits for the callout.
func (h *httpContext) pass() types.Action {
	if h.paused {
		h.resume()
		return types.ActionPause // ignored: the callback's return
	}
	h.allow()
	return types.ActionContinue
}

// reply sends a local reply with a JSON body. Should the host refuse it, the request goes on.
func (h *httpContext) reply(status int, hdrs [][2]string, body []byte) types.Action {
	hdrs = append(hdrs, [2]string{"content-type", "application/json; charset=utf-8"})
	if err := proxywasm.SendHttpResponse(uint32(status), hdrs, body, -1); err != nil {
		h.p.replies.add("status " + strconv.Itoa(status) + " to client " + h.client() + ": " + err.Error())
		h.allow()
		return types.ActionContinue
	}
	h.replied = true
	h.release() // it never reaches the backend: nothing learned
	h.unmeter() // nor used anything
	h.p.m.denied.Increment(1)
	h.countShadow()
	return types.ActionPause
}

// OnHttpResponseHeaders adds the rate-limit headers of an allowed request.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if h.replied {
		return types.ActionContinue
	}
	h.finish()
	h.meterHeaders()
	if h.strip != nil && !usage.IsStream(responseHeader("content-type")) {
		h.strip = nil // a JSON answer (an error): nothing to take out
	}
	for _, kv := range h.hdrs {
		if err := proxywasm.ReplaceHttpResponseHeader(kv[0], kv[1]); err != nil {
			proxywasm.LogWarn("diana.wasm: setting " + kv[0] + ": " + err.Error())
		}
	}
	return types.ActionContinue
}
