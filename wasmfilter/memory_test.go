package main

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/store/slotstore"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tetratelabs/wazero/api"
)

// guestModule digs the guest module out of a compiled VM: proxytest gives no access to it, and
// its emulator never calls the guest's proxy_on_delete, which Envoy calls after every stream;
// without that call the SDK's context map in the guest keeps every request. The path follows
// wazero v1.7.2's internals (wazevo on amd64/arm64, the interpreter elsewhere).
func guestModule(t testing.TB, vm proxytest.WasmVMContext) api.Module {
	t.Helper()
	field := func(v reflect.Value, name string) reflect.Value {
		if !v.IsValid() {
			return v
		}
		f := v.FieldByName(name)
		if !f.IsValid() {
			return f
		}
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	fn := field(reflect.ValueOf(vm).Elem(), "abi").FieldByName("proxyOnLog").Elem().Elem()
	for _, path := range [][]string{{"parent", "module"}, {"f", "moduleInstance"}} {
		v := fn
		for _, name := range path {
			if v = field(v, name); v.IsValid() && v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
		}
		if v.IsValid() && v.CanAddr() {
			if m, ok := v.Addr().Interface().(api.Module); ok {
				return m
			}
		}
	}
	t.Fatalf("cannot find the guest module in %s (wazero's internals changed?)", fn.Type())
	return nil
}

// hit runs one request from client i through the filter, with the response when it goes on;
// del, if not nil, is the guest's proxy_on_delete, called after the stream as Envoy does.
func (e *emu) hit(i int, del api.Function) types.Action {
	e.SetProperty([]string{"source", "address"}, []byte("10.1."+strconv.Itoa(i/256%256)+"."+strconv.Itoa(i%256)+":1"))
	id := e.InitializeHttpContext()
	a := e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/p"}, {":authority", "example.com"}}, true)
	if a == types.ActionContinue {
		e.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	}
	e.CompleteHttpContext(id)
	if del != nil {
		if _, err := del.Call(context.Background(), uint64(id)); err != nil {
			e.t.Fatalf("proxy_on_delete: %v", err)
		}
	}
	return a
}

// 100,000 requests through the compiled module, allowed and denied, from 2,000 clients: the
// module's linear memory stops growing once warm, so no request leaks.
func TestCompiledMemory(t *testing.T) {
	const warm, total, clients = 10_000, 100_000, 2_000
	vm := wasmVM(t)
	e := start(t, vm, perIP)
	mod := guestModule(t, vm)
	del := mod.ExportedFunction("proxy_on_delete")
	if del == nil {
		t.Fatal("diana.wasm exports no proxy_on_delete")
	}
	for i := 0; i < warm; i++ {
		e.hit(i%clients, del)
	}
	before := mod.Memory().Size()
	for i := warm; i < total; i++ {
		e.hit(i%clients, del)
	}
	after := mod.Memory().Size()
	t.Logf("diana.wasm linear memory after %d requests: %d bytes; after %d: %d bytes", warm, before, total, after)
	if after != before {
		t.Errorf("linear memory grew from %d to %d bytes over %d requests", before, after, total-warm)
	}
	if a, d := e.counter(metricAllowed), e.counter(metricDenied); a != 3*clients || d != total-3*clients {
		t.Errorf("allowed %d denied %d, want %d and %d", a, d, 3*clients, total-3*clients)
	}
	e.Tick()
	if h, err := e.GetGaugeMetric(metricHeap); err != nil || h == 0 || h > uint64(after) {
		t.Errorf("%s = %d (%v), want the heap's size, within the linear memory's %d bytes", metricHeap, h, err, after)
	}
}

// BenchmarkRequest is the time per request (headers in, response headers out) on the same
// emulator: the filter in Go and compiled to wasm in wazero, with one per-IP rule, with three
// matching rules and with the per-IP rule and an adaptive one, beside its anchors compiled the same way: testdata/empty (a filter that does
// nothing) and testdata/hostcalls (one that makes the host calls of one per-IP rule and nothing
// else: in this emulator a host call costs microseconds). Clients rotate over 1,000 addresses.
func BenchmarkRequest(b *testing.B) {
	one := `{"rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}}]}`
	three := `{"rules": [
		{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}},
		{"name": "per-ip-path", "by": ["ip", "path"], "limit": {"algorithm": "fixed_window", "limit": 1000000000, "window": "1m"}},
		{"name": "global", "limit": {"algorithm": "sliding_window", "limit": 1000000000, "window": "1s"}}]}`
	// adaptive is the per-IP rule and an adaptive one (global; no probes, a limit no sequential
	// run reaches): a second shared-data key read and written twice, and the :status read.
	adaptive := `{"rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}},
		{"name": "backend", "limit": {"algorithm": "adaptive", "slo": "1s", "min_limit": 10, "max_limit": 10}}]}`
	cases := []struct {
		name string
		vm   func(testing.TB) types.VMContext
		cfg  string
	}{
		{"empty-wasm", func(t testing.TB) types.VMContext { return loadVM(t, compiledEmpty) }, one},
		{"hostcalls-wasm", func(t testing.TB) types.VMContext { return loadVM(t, compiledHostCalls) }, one},
		{"go/1-rule", runners[0].vm, one},
		{"wasm/1-rule", runners[1].vm, one},
		{"wasm/3-rules", runners[1].vm, three},
		{"go/adaptive", runners[0].vm, adaptive},
		{"wasm/adaptive", runners[1].vm, adaptive},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			vm := c.vm(b)
			e := start(b, vm, c.cfg)
			var del api.Function
			if w, ok := vm.(proxytest.WasmVMContext); ok {
				del = guestModule(b, w).ExportedFunction("proxy_on_delete")
			}
			for i := 0; i < 1000; i++ { // every client's state exists
				e.hit(i, del)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if e.hit(i%1000, del) != types.ActionContinue {
					b.Fatal("denied")
				}
			}
		})
	}
}

// 2,000 rules start without creating a slot (wave 1 made 1,024,000 keys at start, 35 MB, 29 s):
// state is created as it is first written, so memory follows the clients seen. In Go and
// compiled; the start time is logged, not asserted.
func TestManyRulesStart(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"rules": [`)
	for i := 0; i < 2000; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "r%d", "match": {"paths": ["/p%d/**"]}, "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1m"}}`, i, i)
	}
	b.WriteString(`]}`)
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			vm := rn.vm(t)
			d := &casData{}
			if v, ok := vm.(*vmContext); ok {
				v.data = d // records the keys written
			}
			began := time.Now()
			e := start(t, vm, b.String())
			took := time.Since(began)
			if _, _, err := d.Get(slotstore.SlotKey("r0", mustAlg(t), 512, 0)); err == nil {
				t.Error("a slot key exists before any request")
			}
			if rn.name == "go" && len(d.keys) != 1 {
				t.Errorf("%d keys written at start, want only the hash key", len(d.keys))
			}
			if r := e.request("/p1999/x"); r.status != 0 {
				t.Fatalf("first request: %d", r.status)
			}
			e.request("/p1999/x")
			if r := e.request("/p1999/x"); r.status != 429 {
				t.Errorf("third request to the last rule: %d, want 429", r.status)
			}
			t.Logf("2,000 rules: plugin start took %v", took)
		})
	}
}

func mustAlg(t *testing.T) algos.Algorithm {
	a, err := algos.NewFixedWindow(2, algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
