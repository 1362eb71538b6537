package main

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	kpp "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"google.golang.org/protobuf/proto"

	"github.com/diana-gw/diana/internal/faultmatrix"
)

// TestFaultMatrix runs the Kong plugin through the fault matrix (internal/faultmatrix): three
// plugin server processes (three Kong nodes), driven over their sockets as Kong drives them,
// deciding in a Redis that is killed, paused, slowed and restarted under load. Set
// DIANA_FAULTS=full for every cell, and DIANA_FAULTS_OUT=file.md for the measured table.
func TestFaultMatrix(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	var nodes [faultmatrix.Nodes]*pluginServer
	for i := range nodes {
		nodes[i] = startServer(t, bin)
	}
	cell := 0
	faultmatrix.Run(t, faultmatrix.FrontEnd{Name: "Kong plugin", Start: func(t *testing.T, target faultmatrix.Target, policy string) []faultmatrix.Worker {
		cell++
		cfg := map[string]any{"policy": "redis", "redis_addrs": target.Addrs,
			"algorithm": "fixed_window", "limit": faultmatrix.Limit, "window": faultmatrix.Window}
		if target.MasterName != "" {
			cfg["redis_sentinel_master"] = target.MasterName
		}
		switch policy {
		case "closed":
			cfg["fail_closed"] = true
		case "local":
			cfg["fallback_nodes"] = faultmatrix.Nodes
		}
		// A plugin id of its own: a new failover store and new keys in every cell.
		pluginID := "faults-" + strconv.Itoa(cell)
		var workers []faultmatrix.Worker
		for n, s := range nodes {
			s.t = t
			id := s.start(cfg, pluginID)
			for range faultmatrix.Workers {
				k := &kongConn{socket: s.socket}
				t.Cleanup(k.close)
				workers = append(workers, faultmatrix.Worker{Node: n, Send: func(ip string) faultmatrix.Outcome {
					res, err := k.access(id, &kongReq{IP: ip})
					switch {
					case err != nil:
						return faultmatrix.Outcome{Err: err}
					case res.Exit:
						return faultmatrix.Outcome{Status: res.Status, Redis: res.Headers["Ratelimit-Limit"] != nil}
					}
					return faultmatrix.Outcome{Status: 200, Redis: res.Headers["Ratelimit-Limit"] != nil}
				}})
			}
		}
		return workers
	}})
}

// kongConn is one connection of Kong to a plugin server, as each nginx worker has: it runs one
// event at a time, and reconnects after an exit (go-pdk then closes the connection). Errors are
// returned, not fatal, so that the load can count them.
type kongConn struct {
	socket string
	conn   net.Conn
	seq    int64
}

func (k *kongConn) access(id int32, r *kongReq) (kongResult, error) {
	if k.conn == nil {
		c, err := net.Dial("unix", k.socket)
		if err != nil {
			return kongResult{}, err
		}
		k.conn = c
	}
	k.seq++
	b, err := proto.Marshal(&kpp.RpcCall{Sequence: k.seq, Call: &kpp.RpcCall_CmdHandleEvent{
		CmdHandleEvent: &kpp.CmdHandleEvent{InstanceId: id, EventName: "access"}}})
	if err != nil {
		return kongResult{}, err
	}
	k.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(k.conn, b); err != nil {
		k.close()
		return kongResult{}, fmt.Errorf("sending the access event: %w", err)
	}
	res, closed, err := answer(k.conn, r, true)
	if err != nil || closed {
		k.close()
	}
	return res, err
}

func (k *kongConn) close() {
	if k.conn != nil {
		k.conn.Close()
		k.conn = nil
	}
}
