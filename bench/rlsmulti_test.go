package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/diana-gw/diana/internal/redistest"
)

// The three limits of BenchmarkRLSMulti's requests, as envoyproxy/ratelimit's descriptors: per
// client address, per path, and one global, with limits far above the load so that nothing is
// refused. envoyproxy/ratelimit counts each in a fixed window; dianad, with Diana's algorithm
// extension, the address in a token bucket and the path in a sliding window, the global one in a
// fixed window (a plain rate_limit) as there.
const (
	multiDescriptors = `domain: multi
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4000000000}
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`
	multiDescriptorsDiana = `domain: multi
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
    algorithm: token_bucket
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4000000000}
    algorithm: sliding_window
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`
	// multiRulesYAML are the same three limits as dianad's rules, for its decision API.
	multiRulesYAML = `rules:
  - {name: ip, by: [ip], mode: cluster, limit: {algorithm: token_bucket, rate: 4000000000, period: 1h}}
  - {name: path, by: [path], mode: cluster, limit: {algorithm: sliding_window, limit: 4000000000, window: 1m}}
  - {name: global, mode: cluster, limit: {algorithm: fixed_window, limit: 4000000000, window: 1s}}
`
)

// multiRequest is the i-th client's request of BenchmarkRLSMulti: its address, its path, and the
// global descriptor; or, with one, its address alone.
func multiRequest(i int, one bool) *pb.RateLimitRequest {
	ip := "10.0." + strconv.Itoa(i%rlsIPs/256) + "." + strconv.Itoa(i%256)
	entry := func(k, v string) []*rlv3.RateLimitDescriptor_Entry {
		return []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}
	}
	ds := []*rlv3.RateLimitDescriptor{{Entries: entry("remote_address", ip)}}
	if !one {
		ds = append(ds, &rlv3.RateLimitDescriptor{Entries: entry("path", "/api/items/"+strconv.Itoa(i%rlsPaths))},
			&rlv3.RateLimitDescriptor{Entries: entry("generic_key", "global")})
	}
	return &pb.RateLimitRequest{Domain: "multi", Descriptors: ds}
}

// BenchmarkRLSMulti is a request that three limits apply to (per client address, per path, one
// global), under the closed-loop load of BenchmarkRLS at 16 and 64 clients, on one redis-server:
// envoyproxy/ratelimit's own server with three descriptors (the anchor); dianad's rate limit
// service with the same three ("diana": a token bucket, a sliding window and a fixed window, in
// one script call per round trip), and with the first alone ("diana-1", the one-rule request);
// and dianad's decision API (POST /v1/check over HTTP/1.1 keep-alive connections, "check") with
// the same limits as three cluster rules, decided together, all or nothing. The targets take turns
// every 1,000 requests. It reports each one's requests per second, p99, CPU per request of its
// process and of redis-server, and the commands it sends Redis per request (INFO commandstats:
// script calls for dianad, INCRBY and EXPIRE for envoyproxy/ratelimit), and the ratios to the
// anchor; and diana's Redis CPU per request over diana-1's.
func BenchmarkRLSMulti(b *testing.B) {
	rs := redistest.Start(b)
	root := b.TempDir()
	rlDir := filepath.Join(root, "rl", "config") // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
	dianaDir := filepath.Join(root, "diana")
	writeConfigs(b, "multi.yaml", map[string]string{rlDir: multiDescriptors, dianaDir: multiDescriptorsDiana})
	rlAddr, rlPid := startRatelimitWith(b, root, rs.Addr, multiRequest(0, false))
	grpcAddr, admin, dianaPid := startDianad(b, buildDianad(b), dianaDir, rs.Addr, multiRulesYAML, multiRequest(0, false))
	ctx := context.Background()
	// The commands a client sends: dianad's script calls (the commands a script makes count in
	// INFO commandstats too, and are not counted here), envoyproxy/ratelimit's INCRBY and EXPIRE.
	commands := func(scripts bool) func() int64 {
		return func() int64 {
			if scripts {
				return scriptCalls(b, rs)
			}
			st, err := rs.CommandStats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			return st["incrby"].Calls + st["expire"].Calls
		}
	}
	reqs := func(one bool) []*pb.RateLimitRequest {
		r := make([]*pb.RateLimitRequest, rlsIPs)
		for i := range r {
			r[i] = multiRequest(i, one)
		}
		return r
	}
	loads := []*rlsLoad{
		newGRPCLoad(b, "ratelimit", rlAddr, rlPid, reqs(false)),
		newGRPCLoad(b, "diana", grpcAddr, dianaPid, reqs(false)),
		newGRPCLoad(b, "diana-1", grpcAddr, dianaPid, reqs(true)),
		newCheckLoad(b, "check", admin, dianaPid),
	}
	for _, l := range loads {
		l.redisPid, l.commands = rs.Pid(), commands(l.name != "ratelimit")
	}
	warmUp(b, loads)
	for _, clients := range []int{16, 64} {
		b.Run("clients-"+strconv.Itoa(clients), func(b *testing.B) {
			stats := inTurns(b, loads, clients)
			reportLoads(b, loads, stats)
			if stats[2].redisCPU > 0 { // a run of a few requests can fall within one clock tick
				b.ReportMetric(stats[1].redisCPU/stats[2].redisCPU, "diana/diana-1-redis-cpu")
			}
		})
	}
	checkNoFallback(b, "http://"+admin+"/metrics", `diana_backend_errors_total{rule="rls:multi.remote_address"}`)
	checkNoFallback(b, "http://"+admin+"/metrics", `diana_backend_errors_total{rule="ip"}`)
}

// newCheckLoad is the load of the three-limit requests on dianad's decision API at admin (POST
// /v1/check), served by process pid, over keep-alive connections: an answer that is not an
// admission is a failure.
func newCheckLoad(b testing.TB, name, admin string, pid int) *rlsLoad {
	bodies := make([][]byte, rlsIPs)
	for i := range bodies {
		ip := "10.0." + strconv.Itoa(i%rlsIPs/256) + "." + strconv.Itoa(i%256)
		bodies[i] = []byte(`{"client_ip":"` + ip + `","path":"/api/items/` + strconv.Itoa(i%rlsPaths) + `"}`)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(c.CloseIdleConnections)
	url := "http://" + admin + "/v1/check"
	return &rlsLoad{name: name, pid: pid, call: func(w, i int) error {
		resp, err := c.Post(url, "application/json", bytes.NewReader(bodies[(w*7919+i)%len(bodies)]))
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var v struct{ Allowed bool }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil || !v.Allowed {
			return fmt.Errorf("unexpected answer %d %s", resp.StatusCode, body)
		}
		return nil
	}}
}
