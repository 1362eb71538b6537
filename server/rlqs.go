package server

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diana-gw/diana/rlqs"
	"github.com/diana-gw/diana/rls"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/stack"
)

// newRLQS sets up Envoy's rate limit quota service on the rate limit service's gRPC server:
// the same listener and descriptor config, its limits divided among the Envoy instances in this
// process (rls.mode local) or through Redis (cluster).
func (s *Server) newRLQS(st *rlsState, cfg *rls.Config) {
	r := s.cfg.RLS
	o := rlqs.Options{OnError: r.OnError, Nodes: r.Nodes,
		MaxBucketsPerStream: r.Quota.MaxBucketsPerStream, MaxBuckets: r.Quota.MaxBuckets, MaxStreams: r.Quota.MaxStreams,
		AssignmentTTL: r.Quota.AssignmentTTL, Sent: s.rlqsSent, Refused: s.rlqsRefused, Failed: s.rlqsFailed}
	if r.Mode == rules.Cluster {
		prefix := s.cfg.Redis.Prefix
		if prefix == "" {
			prefix = stack.DefaultPrefix
		}
		// The decisions' timeout and breaker: an open breaker spares Redis for both.
		o.Fleet, o.Guard = rlqs.NewRedis(s.rdb, prefix, nil), s.cluster.Call
	}
	st.quota = rlqs.New(cfg, o)
	pb.RegisterRateLimitQuotaServiceServer(st.grpc.Server, st.quota)
	s.met.rlqs(st.quota)
}

// rlqsSent counts every action sent; an ALLOW_ALL is a pass without limit, logged too.
func (s *Server) rlqsSent(a rlqs.Action, why, domain string, bucket *pb.BucketId) {
	s.met.rlqsActions.WithLabelValues(a.String(), why).Inc()
	if a != rlqs.AllowAll {
		return
	}
	s.limited.Info("rlqs: bucket assigned ALLOW_ALL", "reason", why, "domain", domain, "bucket", bucketText(bucket))
}

func (s *Server) rlqsRefused(reason string, err error) {
	s.met.rlqsRefused.WithLabelValues(reason).Inc()
	s.limited.Warn("rlqs: stream refused", "reason", reason, "err", err)
}

func (s *Server) rlqsFailed(err error) {
	s.met.backendError("rlqs")
	s.limited.Warn("rate-limit backend failed: rlqs assigned by its on_error policy", "on_error", s.cfg.RLS.OnError.String(), "err", err)
}

// bucketText is a bucket id for a log line, its keys in order.
func bucketText(b *pb.BucketId) string {
	k, _ := rlqs.BucketKey(b) // checked when it arrived
	return k
}

// rlqs exports the quota service's state, read at each scrape, and its counters.
func (m *metrics) rlqs(q *rlqs.Service) {
	m.rlqsActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_rlqs_actions_total",
		Help: "Bucket actions the rate limit quota service sent, by action (token_bucket, allow_all, deny_all, abandon) and reason (limit, no_limit, unlimited, shadow, on_error, idle, removed).",
	}, []string{"action", "reason"})
	m.rlqsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "diana_rlqs_refused_streams_total",
		Help: "Rate limit quota streams ended with an error, by reason (unknown_domain, malformed, too_many_buckets, absurd_usage, too_many_streams).",
	}, []string{"reason"})
	for _, r := range []string{rlqs.RefusedUnknownDomain, rlqs.RefusedMalformed, rlqs.RefusedTooMany, rlqs.RefusedAbsurd, rlqs.RefusedStreams} {
		m.rlqsRefused.WithLabelValues(r) // shown as 0 from the start, for alerts
	}
	m.reg.MustRegister(m.rlqsActions, m.rlqsRefused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "diana_rlqs_streams",
			Help: "Rate limit quota streams open (one per Envoy instance).",
		}, func() float64 { return float64(q.Stats().Streams) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "diana_rlqs_buckets",
			Help: "Buckets the rate limit quota streams hold together (bounded by rls.quota.max_buckets).",
		}, func() float64 { return float64(q.Stats().Buckets) }),
	)
}
