// Command empty is the smallest proxy-wasm HTTP filter: every callback is the SDK's default,
// which lets the request go on. The benchmarks run it beside diana.wasm, in the same emulator,
// as the anchor of the filter's cost per request.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() { proxywasm.SetVMContext(&vm{}) }

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct{ types.DefaultPluginContext }

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
