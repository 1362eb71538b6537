package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
)

// metrics are the server's Prometheus metrics, on a registry of its own (several servers in
// one process, as in tests, do not share counters).
type metrics struct {
	reg           *prometheus.Registry
	decisions     *prometheus.CounterVec
	backendErrors *prometheus.CounterVec
	redisDuration prometheus.Histogram
	breaker       prometheus.Gauge
	starved       prometheus.Counter
	writeBackLost prometheus.Counter
	reloads       *prometheus.CounterVec
	info          *prometheus.GaugeVec
	rlsUnknown    prometheus.Counter
	adaptive      *prometheus.GaugeVec
	authProblems  *prometheus.CounterVec
	// connsReclaimed counts, by listener, the connections closed at the cap to make room.
	connsReclaimed *prometheus.CounterVec
	// silentStreams counts the rate limit service's streams ended for sending no message.
	silentStreams prometheus.Counter
	addrHeaders   *prometheus.CounterVec
	rlqsActions   *prometheus.CounterVec // set with the rate limit quota service (rlqs.go)
	rlqsRefused   *prometheus.CounterVec
	// usageTokens counts the units settled from responses, and usageUnread the responses
	// whose usage could not be read (charged the fallback), by rule and reason.
	usageTokens *prometheus.CounterVec
	usageUnread *prometheus.CounterVec
	// settleRefused counts the settle tickets refused, by reason (settle.go).
	settleRefused *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diana_decisions_total",
			Help: "Rule decisions, by rule and result (allowed, denied, shadow_denied, unlimited).",
		}, []string{"rule", "result"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diana_backend_errors_total",
			Help: "Decisions of cluster rules that Redis could not make and the rule's on_error policy made instead.",
		}, []string{"rule"}),
		redisDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "diana_redis_request_duration_seconds",
			Help:    "Duration of the round trips to Redis that decide cluster rules and divide the rate limit quota service's limits.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "diana_redis_breaker_open",
			Help: "1 while the Redis circuit breaker is open (Redis is not called), else 0.",
		}),
		starved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "diana_redis_timeouts_starved_total",
			Help: "Redis timeouts not counted against Redis by the breaker: dianad itself was starved of CPU (the requests still got their on_error decision).",
		}),
		writeBackLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "diana_redis_write_back_lost_units_total",
			Help: "Units dianad admitted alone during a Redis outage (on_error local) and could not write back into Redis when it returned: the cluster may admit them again.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diana_config_reloads_total",
			Help: "Attempts to read a config source, by source (file, http, redis, rls: the rate limit service's descriptor config) and result (ok, error).",
		}, []string{"source", "result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "diana_config_info",
			Help: "1 for the source of the running config (file, http, redis or embedded).",
		}, []string{"source"}),
		rlsUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "diana_rls_unknown_domain_total",
			Help: "Rate limit service requests for a domain no descriptor config declares (their descriptors pass unlimited).",
		}),
		adaptive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "diana_adaptive_limit",
			Help: "The concurrency limit an adaptive rule has learned, as of its last decision (of the last identity it decided, for a rule counted by client).",
		}, []string{"rule"}),
		authProblems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "diana_forward_auth_problems_total",
			Help: "Forward-auth requests (/v1/auth) refused (bad_request, unauthorized) or whose forwarded headers or route were not believed (untrusted_peer).",
		}, []string{"problem"}),
	}
	m.connsReclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_connections_reclaimed_total",
		Help: "Connections closed by a listener (proxy, admin, rls) at its connection limit to make room: the one waiting the longest for a request.",
	}, []string{"listener"})
	m.silentStreams = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "diana_rls_silent_streams_total",
		Help: "Streams of the rate limit service's gRPC listener ended for sending no message within rls.connections.header_timeout.",
	})
	for _, p := range []string{"bad_request", "unauthorized", "untrusted_peer"} {
		m.authProblems.WithLabelValues(p) // shown as 0 from the start, for alerts
	}
	m.addrHeaders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_client_address_header_problems_total",
		Help: "Requests from trusted proxies whose address headers are not as client_ip_header expects: another address header sent (unexpected) or the configured one missing or unreadable (missing).",
	}, []string{"problem"})
	for _, p := range []string{"unexpected", "missing"} {
		m.addrHeaders.WithLabelValues(p) // shown as 0 from the start, for alerts
	}
	m.usageTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_usage_tokens_total",
		Help: "Units charged when responses ended, by rules whose cost comes from the response (usage): the usage read, or the fallback.",
	}, []string{"rule"})
	m.usageUnread = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_usage_unread_total",
		Help: "Responses whose usage could not be read and were charged the rule's fallback, by rule and reason (missing, value, duplicate, syntax, depth, too_large, truncated, other).",
	}, []string{"rule", "reason"})
	m.settleRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_settle_refused_total",
		Help: "Tickets POST /v1/settle refused and did not settle, by reason: replay (settled before), record_full (this node's record of settled tickets is full).",
	}, []string{"reason"})
	for _, r := range []string{"replay", "record_full"} {
		m.settleRefused.WithLabelValues(r) // shown as 0 from the start, for alerts
	}
	m.reg.MustRegister(m.addrHeaders, m.usageTokens, m.usageUnread, m.settleRefused)
	m.reg.MustRegister(m.decisions, m.backendErrors, m.redisDuration, m.breaker, m.starved, m.writeBackLost, m.reloads, m.info, m.rlsUnknown, m.adaptive, m.authProblems, m.connsReclaimed, m.silentStreams,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) decision(rule string, o rules.Outcome) {
	m.decisions.WithLabelValues(rule, o.String()).Inc()
}

func (m *metrics) backendError(rule string) { m.backendErrors.WithLabelValues(rule).Inc() }

// adaptiveLimit is the engine's Limit hook.
func (m *metrics) adaptiveLimit(r *rules.Rule, limit int64) {
	m.adaptive.WithLabelValues(r.Name).Set(float64(limit))
}

func (m *metrics) authProblem(problem string) { m.authProblems.WithLabelValues(problem).Inc() }

// observeRedis is failover's Observe hook.
func (m *metrics) observeRedis(d time.Duration, _ error) { m.redisDuration.Observe(d.Seconds()) }

func (m *metrics) breakerOpen(open bool) {
	if open {
		m.breaker.Set(1)
	} else {
		m.breaker.Set(0)
	}
}

func (m *metrics) reload(source string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(source, result).Inc()
}

// configInfo marks source as the running config's.
func (m *metrics) configInfo(source string) {
	m.info.Reset()
	m.info.WithLabelValues(source).Set(1)
}

// conns exports a listener's open connections and its cap.
func (m *metrics) conns(listener string, max int, open func() int) {
	labels := prometheus.Labels{"listener": listener}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "diana_connections_open",
			Help:        "Open connections of a listener (proxy, admin, rls).",
			ConstLabels: labels,
		}, func() float64 { return float64(open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "diana_connections_max",
			Help:        "A listener's connection limit (connections.max, or its share of the open-file limit).",
			ConstLabels: labels,
		}, func() float64 { return float64(max) }),
	)
	m.connsReclaimed.WithLabelValues(listener) // shown as 0 from the start, for alerts
}

// localStore exports the in-process store's size, bound and evictions, read at each scrape.
func (m *metrics) localStore(s *memstore.Store) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "diana_local_store_entries",
			Help: "Identities the in-process store of local rules holds (expired ones included until swept, every minute).",
		}, func() float64 { return float64(s.Stats().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "diana_local_store_max_entries",
			Help: "The in-process store's bound (local_store.max_keys).",
		}, func() float64 { return float64(s.Stats().MaxEntries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "diana_local_store_evictions_total",
			Help: "Live identities the full in-process store dropped to make room (each starts afresh if it comes back): raise local_store.max_keys if this grows.",
		}, func() float64 { return float64(s.Stats().Evicted) }),
	)
}

// batches exports a batched-mode store's counters.
func (m *metrics) batches(s *batch.Store) {
	units := func(name string, f func(batch.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "diana_batch_units_total",
			Help:        "Units of batched cluster rules, by what became of them: granted by Redis, spent on this node, expired unspent (or held at shutdown), returned to Redis (of the expired).",
			ConstLabels: prometheus.Labels{"outcome": name},
		}, func() float64 { return float64(f(s.Stats())) })
	}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "diana_batches_total",
			Help: "Round trips to Redis that asked for a batch of units for a batched cluster rule.",
		}, func() float64 { return float64(s.Stats().Batches) }),
		units("granted", func(st batch.Stats) int64 { return st.Granted }),
		units("spent", func(st batch.Stats) int64 { return st.Spent }),
		units("expired", func(st batch.Stats) int64 { return st.Expired }),
		units("returned", func(st batch.Stats) int64 { return st.Returned }),
	)
}

// shares exports the learned share of each on_error local rule, read at each scrape.
func (m *metrics) shares(sh *failover.Shares) {
	m.reg.MustRegister(shareCollector{sh})
}

var shareDesc = prometheus.NewDesc("diana_fallback_share",
	"This node's learned share of a cluster rule's traffic (on_error local), without headroom; 0 until learned (the limit divided by nodes applies then).",
	[]string{"rule"}, nil)

type shareCollector struct{ sh *failover.Shares }

func (c shareCollector) Describe(ch chan<- *prometheus.Desc) { ch <- shareDesc }

func (c shareCollector) Collect(ch chan<- prometheus.Metric) {
	c.sh.Each(func(rule string, share float64) {
		ch <- prometheus.MustNewConstMetric(shareDesc, prometheus.GaugeValue, share, rule)
	})
}
