package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/bridge"
	kpp "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file plays Kong's side of the plugin-server protocol: it answers the PDK calls a plugin
// makes during one event, as Kong's Lua bridge does, and records them. The unit tests run it
// against a Config in process (over net.Pipe); the end-to-end test against the built binary
// over its unix socket.

// kongReq is the request Kong answers PDK calls about.
type kongReq struct {
	IP         string
	Consumer   string // id; "" answers no consumer
	Credential string
	Path       string
	Service    string
	Headers    map[string]string // lower-case names
	// Again are further values of headers (lower-case names), after Headers' own: a header
	// given more than once, which kong.request.get_headers shows and get_header does not.
	Again  map[string][]string
	Shared map[string]any // kong.ctx.shared, kept from access to log
	Status int            // the response's status, for kong.response.get_status
	// Upstream are the service response's headers, for kong.service.response.get_headers;
	// nil answers no response from the service.
	Upstream map[string][]string
}

// kongResult is what the plugin did during one event.
type kongResult struct {
	Calls   []string            // PDK methods, in order
	Headers map[string][]string // from set_headers or exit
	Exit    bool
	Status  int
	Body    string
	Logs    []string // kong.log.LEVEL calls: "LEVEL: message"
}

func writeFrame(w io.Writer, b []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil || len(b) == 0 {
		return err // an empty Write would block on a net.Pipe until a Read that never comes
	}
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.LittleEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

// answer serves the PDK calls of one event until the plugin ends it: an empty frame (then,
// when rpcReturn is set, the RpcReturn frame that follows), or the connection closed after
// kong.response.exit. closed reports the latter.
func answer(conn net.Conn, r *kongReq, rpcReturn bool) (res kongResult, closed bool, err error) {
	for {
		m, err := readFrame(conn)
		if err != nil {
			if res.Exit && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)) {
				return res, true, nil
			}
			return res, false, fmt.Errorf("reading a PDK call: %w", err)
		}
		if len(m) == 0 {
			if rpcReturn {
				b, err := readFrame(conn)
				if err != nil {
					return res, false, fmt.Errorf("reading the RpcReturn: %w", err)
				}
				if err := proto.Unmarshal(b, &kpp.RpcReturn{}); err != nil {
					return res, false, fmt.Errorf("decoding the RpcReturn: %w", err)
				}
			}
			return res, false, nil
		}
		method := string(m)
		res.Calls = append(res.Calls, method)
		args, err := readFrame(conn)
		if err != nil {
			return res, false, fmt.Errorf("reading the arguments of %s: %w", method, err)
		}
		var ret proto.Message
		switch method {
		case "kong.client.get_forwarded_ip":
			ret = bridge.WrapString(r.IP)
		case "kong.client.get_consumer":
			if r.Consumer != "" {
				ret = &kpp.Consumer{Id: r.Consumer, Username: "user-" + r.Consumer}
			}
		case "kong.client.get_credential":
			if r.Credential != "" {
				ret = &kpp.AuthenticatedCredential{Id: r.Credential, ConsumerId: r.Consumer}
			}
		case "kong.request.get_path":
			ret = bridge.WrapString(r.Path)
		case "kong.router.get_service":
			ret = &kpp.Service{Id: r.Service}
		case "kong.request.get_header":
			var name kpp.String
			if err := proto.Unmarshal(args, &name); err != nil {
				return res, false, err
			}
			ret = bridge.WrapString(r.Headers[strings.ToLower(name.V)])
		case "kong.request.get_headers":
			all := map[string][]string{}
			for k, v := range r.Headers {
				all[k] = []string{v}
			}
			for k, vs := range r.Again {
				all[k] = append(all[k], vs...)
			}
			st, err := bridge.WrapHeaders(all)
			if err != nil {
				return res, false, err
			}
			ret = st
		case "kong.response.get_status":
			ret = &kpp.Int{V: int32(r.Status)}
		case "kong.service.response.get_headers":
			if r.Upstream != nil {
				st, err := bridge.WrapHeaders(r.Upstream)
				if err != nil {
					return res, false, err
				}
				ret = st
			}
		case "kong.response.set_headers":
			var st structpb.Struct
			if err := proto.Unmarshal(args, &st); err != nil {
				return res, false, err
			}
			res.Headers = bridge.UnwrapHeaders(&st)
		case "kong.response.exit":
			var ea kpp.ExitArgs
			if err := proto.Unmarshal(args, &ea); err != nil {
				return res, false, err
			}
			res.Exit, res.Status, res.Body = true, int(ea.Status), string(ea.Body)
			if ea.Headers != nil {
				res.Headers = bridge.UnwrapHeaders(ea.Headers)
			}
		case "kong.log.err", "kong.log.warn", "kong.log.notice":
			var l structpb.ListValue
			if err := proto.Unmarshal(args, &l); err != nil {
				return res, false, err
			}
			var msg strings.Builder
			for _, v := range l.Values {
				fmt.Fprint(&msg, v.AsInterface())
			}
			res.Logs = append(res.Logs, strings.TrimPrefix(method, "kong.log.")+": "+msg.String())
		case "kong.ctx.shared.set":
			var kv kpp.KV
			if err := proto.Unmarshal(args, &kv); err != nil {
				return res, false, err
			}
			if r.Shared == nil {
				r.Shared = map[string]any{}
			}
			r.Shared[kv.K] = kv.V.AsInterface()
		case "kong.ctx.shared.get":
			var k kpp.String
			if err := proto.Unmarshal(args, &k); err != nil {
				return res, false, err
			}
			v, err := structpb.NewValue(r.Shared[k.V])
			if err != nil {
				return res, false, err
			}
			ret = v
		default:
			return res, false, fmt.Errorf("unexpected PDK call %s", method)
		}
		var out []byte
		if ret != nil {
			if out, err = proto.Marshal(ret); err != nil {
				return res, false, err
			}
		}
		if err := writeFrame(conn, out); err != nil {
			return res, false, fmt.Errorf("answering %s: %w", method, err)
		}
	}
}

// event runs one event of c in process, as go-pdk's server does, with Kong's side played by
// answer.
func event(t testing.TB, c *Config, name string, r *kongReq) kongResult {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer a.Close()
		k := pdk.Init(a)
		switch name {
		case "access":
			c.Access(k)
		case "log":
			c.Log(k)
		}
		writeFrame(a, nil) // fails after an exit, which closed the connection: so does go-pdk
	}()
	b.SetDeadline(time.Now().Add(30 * time.Second))
	res, _, err := answer(b, r, false)
	if err != nil {
		t.Fatalf("%s event: %v", name, err)
	}
	wg.Wait()
	return res
}
