package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/faultmatrix"
)

// TestFaultMatrix runs dianad through the fault matrix (internal/faultmatrix): three servers on
// real listeners, proxying to an upstream that always answers 200, deciding in a Redis that is
// killed, paused, slowed and restarted under load. Set DIANA_FAULTS=full for every cell, and
// DIANA_FAULTS_OUT=file.md for the measured table.
func TestFaultMatrix(t *testing.T) {
	faultmatrix.Run(t, faultmatrix.FrontEnd{Name: "dianad", Start: startFaultNodes})
}

// startFaultNodes starts faultmatrix.Nodes dianad servers deciding in target with policy,
// with the default Redis timeout and breaker.
func startFaultNodes(t *testing.T, target faultmatrix.Target, policy string) []faultmatrix.Worker {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	t.Cleanup(upstream.Close)
	master := ""
	if target.MasterName != "" {
		master = "\n  master_name: " + target.MasterName
	}
	yaml := header + `trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: up
    url: "` + upstream.URL + `"
redis:
  addrs: ["` + strings.Join(target.Addrs, `", "`) + `"]` + master + `
rules:
  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: ` + policy + `
    nodes: ` + strconv.Itoa(faultmatrix.Nodes) + `
    limit: {algorithm: fixed_window, limit: ` + strconv.Itoa(faultmatrix.Limit) + `, window: ` + faultmatrix.Window + `}
`
	var workers []faultmatrix.Worker
	for n := range faultmatrix.Nodes {
		ts := startFile(t, yaml)
		for range faultmatrix.Workers {
			workers = append(workers, faultmatrix.Worker{Node: n, Send: func(ip string) faultmatrix.Outcome {
				r, err := do(http.MethodGet, ts.proxy+"/", ip, nil, "")
				if err != nil {
					return faultmatrix.Outcome{Err: err}
				}
				return faultmatrix.Outcome{Status: r.status, Redis: r.header.Get("RateLimit-Limit") != ""}
			}})
		}
	}
	return workers
}
