package rlqs

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/rls"
)

// config parses one descriptor config file.
func config(t *testing.T, yaml string) *rls.Config {
	t.Helper()
	c, err := rls.Parse([]rls.File{{Name: "edge.yaml", Data: []byte(yaml)}}, rls.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func apiLimit(perSecond int) string {
	return `
domain: edge
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: ` + itoa(perSecond) + `}
`
}

var acme = map[string]string{"name": "api", "tenant": "acme"}

const (
	step     = 10 * time.Millisecond
	interval = time.Second
)

// uneven is the traffic of three Envoy instances: 30, 60 and 150 requests a second, the third
// falling to 40 after 30 s; always more than the limit together.
func uneven(i int, at time.Duration) float64 {
	if i == 2 && at >= 30*time.Second {
		return 40
	}
	return []float64{30, 60, 150}[i]
}

// checkSplit fails unless the envoys admitted, together, the limit over d within 5%.
func checkSplit(t *testing.T, admitted []int, limit float64, d time.Duration) {
	t.Helper()
	want := limit * d.Seconds()
	got := float64(sum(admitted))
	t.Logf("admitted %v = %.0f, limit %.0f over %v: %+.2f%%", admitted, got, want, d, 100*(got-want)/want)
	if got < 0.95*want || got > 1.05*want {
		t.Fatalf("admitted %.0f over %v, want %.0f within 5%%", got, d, want)
	}
}

// N Envoy instances with uneven traffic against one limit admit the limit, over a minute:
// steady, and with Poisson arrivals around the same rates.
func TestSplitLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate func(int, time.Duration) float64
	}{
		{"steady", uneven},
		{"poisson", poisson(uneven, 1)},
		{"poisson2", poisson(uneven, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			s := New(config(t, apiLimit(100)), Options{Now: clock.Now})
			addr := serve(t, s)
			var envoys []*envoy
			for range 3 {
				envoys = append(envoys, dialEnvoy(t, addr, "edge", clock))
			}
			admitted := (&sim{clock: clock, envoys: envoys, bucket: acme, rate: tc.rate}).run(time.Minute)
			checkSplit(t, admitted, 100, time.Minute)
			// Divided by usage: the busiest instance got the most.
			if !(admitted[2] > admitted[1] && admitted[1] > admitted[0]) {
				t.Errorf("admitted %v: not in the order of the instances' traffic", admitted)
			}
			if st := s.Stats(); st.Streams != 3 || st.Buckets != 3 {
				t.Errorf("stats %+v, want 3 streams holding 3 buckets", st)
			}
		})
	}
}

// reload sets c on services and waits until each of envoys has taken the push of what it
// changes. The push comes at once on its stream, but the simulation's clock does not wait for
// it: taking it before the next step keeps the instances from reporting across it, which would
// make the figures depend on the machine's load.
func reload(envoys []*envoy, c *rls.Config, services ...*Service) {
	want := make([]int, len(envoys))
	for i, e := range envoys {
		e.mu.Lock()
		want[i] = e.answers + 1
		e.mu.Unlock()
	}
	for _, s := range services {
		s.SetConfig(c)
	}
	for i, e := range envoys {
		e.await(want[i])
	}
}

// A limit lowered on reload takes effect within one report interval; a limit removed makes the
// service abandon the bucket.
func TestReload(t *testing.T) {
	clock := newClock()
	s := New(config(t, apiLimit(100)), Options{Now: clock.Now})
	addr := serve(t, s)
	var envoys []*envoy
	for range 3 {
		envoys = append(envoys, dialEnvoy(t, addr, "edge", clock))
	}
	sm := &sim{clock: clock, envoys: envoys, bucket: acme, rate: uneven}
	sm.run(10*time.Second + interval/2)
	reload(envoys, config(t, apiLimit(40)), s)
	sm.run(interval) // within one report interval, the new limit applies
	admitted := sm.run(20 * time.Second)
	checkSplit(t, admitted, 40, 20*time.Second)

	reload(envoys, config(t, "domain: edge\n"), s) // the abandon_action, pushed
	for _, e := range envoys {
		e.mu.Lock()
		n := len(e.buckets)
		e.mu.Unlock()
		if n != 0 {
			t.Fatalf("after the limit's removal the instance still holds %d buckets", n)
		}
	}
	// A request into the bucket again: reported afresh, and allowed without limit.
	if !envoys[0].request(acme) || envoys[0].buckets[key(acme)].strategy.GetBlanketRule().String() != "ALLOW_ALL" {
		t.Fatalf("the abandoned bucket, reported again: %v", envoys[0].buckets[key(acme)].strategy)
	}
}

// Two dianad in cluster mode, one redis-server: the instances they serve share one limit, and
// a lowered limit reloaded on both takes effect within one report interval.
func TestSplitCluster(t *testing.T) {
	rs := redistest.Start(t)
	clock := newClock()
	var servers []*Service
	var addrs []string
	for range 2 {
		s := New(config(t, apiLimit(100)), Options{Now: clock.Now, Fleet: NewRedis(rs.Client(), "diana:", clock.Now)})
		servers = append(servers, s)
		addrs = append(addrs, serve(t, s))
	}
	var envoys []*envoy
	for i := range 3 {
		envoys = append(envoys, dialEnvoy(t, addrs[i%2], "edge", clock))
	}
	sm := &sim{clock: clock, envoys: envoys, bucket: acme, rate: uneven}
	checkSplit(t, sm.run(time.Minute), 100, time.Minute)

	reload(envoys, config(t, apiLimit(40)), servers...)
	sm.run(interval)
	checkSplit(t, sm.run(20*time.Second), 40, 20*time.Second)
}

// A share that moves by less than Tolerance is sent again unchanged, so that Envoy keeps its
// token bucket; a larger move is a new assignment.
func TestSteadyAssignment(t *testing.T) {
	clock := newClock()
	s := New(config(t, apiLimit(100)), Options{Now: clock.Now})
	addr := serve(t, s)
	a, b := dialEnvoy(t, addr, "edge", clock), dialEnvoy(t, addr, "edge", clock)
	report := func(e *envoy, n uint64) *typev3.TokenBucket {
		e.send(&pb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*pb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &pb.BucketId{Bucket: acme}, NumRequestsAllowed: n}}})
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.buckets[key(acme)].strategy.GetTokenBucket()
	}
	a.request(acme)
	b.request(acme)
	var first *typev3.TokenBucket
	for i, nb := range []uint64{100, 100, 101, 99, 100, 102, 150} {
		clock.Add(time.Second)
		report(b, nb)
		tb := report(a, 50)
		switch {
		case i == 1:
			first = tb
		case i > 1 && i < 6 && !proto.Equal(tb, first):
			t.Fatalf("report %d: the other instance's traffic moved by 2%% at most, yet %v became %v", i, first, tb)
		case i == 6 && proto.Equal(tb, first):
			t.Fatalf("report %d: the other instance's traffic grew by half, yet the assignment stayed %v", i, tb)
		}
	}
}
