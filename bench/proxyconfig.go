// Package bench holds Diana's benchmarks, each beside its anchor (go test -bench . ./bench/),
// and the setup the proxy load tools share with them (bench/proxyload).
package bench

import (
	"fmt"
	"strconv"
)

// ProxyConfig is dianad's config in local mode for the proxy benchmarks, listening on listen
// (host:port) in front of upstream (a URL), without the admin API: the everyday case of three
// rules checked per request (check, then commit), with limits far above the load so that
// nothing is denied. Headers are on, as by default; the loopback is a trusted proxy, so that
// X-Forwarded-For names the client.
func ProxyConfig(listen, upstream string) string {
	return fmt.Sprintf(`version: 1
listen: %q
admin:
  listen: ""
trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: api
    url: %q
rules:
  - name: per-ip
    by: [ip]
    limit:
      algorithm: token_bucket
      rate: 100000
      period: 1s
      burst: 100000
  - name: per-path
    match:
      paths: ["/api/**"]
    by: [ip, path]
    limit:
      algorithm: sliding_window
      limit: 10000000
      window: 1m
  - name: global
    by: [global]
    limit:
      algorithm: fixed_window
      limit: 1000000000
      window: 1s
`, listen, upstream)
}

// The client mix of the proxy benchmarks: request i comes from client address i%ProxyIPs
// (X-Forwarded-For) to one of ProxyPaths paths.
const (
	ProxyIPs   = 1_000
	ProxyPaths = 8
)

// ProxyRequest returns the path and X-Forwarded-For of request i of the mix.
func ProxyRequest(i int) (path, xff string) {
	i %= ProxyIPs
	return "/api/items/" + strconv.Itoa(i%ProxyPaths), "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
}
