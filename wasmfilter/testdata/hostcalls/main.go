// Command hostcalls is a proxy-wasm HTTP filter that makes the host calls diana.wasm makes on the
// allowed path of one per-IP rule, and nothing else: the client address, the path, one shared-data
// read and compare-and-swap write, the allowed counter, three response headers. The benchmarks
// run it beside diana.wasm, in the same emulator: what diana.wasm costs above it is its own
// work, what it costs above the empty filter includes what any filter doing the same must pay
// the host.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() { proxywasm.SetVMContext(&vm{}) }

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	allowed proxywasm.MetricCounter
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	p.allowed = proxywasm.DefineCounterMetric("hostcalls.allowed")
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext { return &http{p: p} }

type http struct {
	types.DefaultHttpContext
	p *plugin
}

// slot is a shared-data value the size of one of diana.wasm's slots holding two clients and its
// overflow state (1 + 3 × 56 bytes; the benchmark's 1,000 clients over 512 slots hold about two).
var slot = make([]byte, 1+3*56)

func (h *http) OnHttpRequestHeaders(int, bool) types.Action {
	src, _ := proxywasm.GetProperty([]string{"source", "address"})
	path, _ := proxywasm.GetHttpRequestHeader(":path")
	key := "hostcalls:" + string(src[:min(len(src), 4)]) + path
	_, cas, _ := proxywasm.GetSharedData(key)
	_ = proxywasm.SetSharedData(key, slot, cas)
	h.p.allowed.Increment(1)
	return types.ActionContinue
}

func (h *http) OnHttpResponseHeaders(int, bool) types.Action {
	for _, kv := range [][2]string{{"ratelimit-limit", "1000000000"}, {"ratelimit-remaining", "999999999"}, {"ratelimit-reset", "1"}} {
		_ = proxywasm.ReplaceHttpResponseHeader(kv[0], kv[1])
	}
	return types.ActionContinue
}
