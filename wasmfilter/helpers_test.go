package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// compiled builds diana.wasm once per test binary with build/tinygo.sh (which provisions TinyGo
// when it is missing); a failure to build fails the tests that need it, never skips them.
var compiled = sync.OnceValues(func() ([]byte, error) { return tinygoBuild(".") })

// compiledEmpty is testdata/empty, the anchor of the benchmarks: a filter that does nothing.
var compiledEmpty = sync.OnceValues(func() ([]byte, error) { return tinygoBuild("./testdata/empty") })

// compiledHostCalls is testdata/hostcalls, the second anchor: a filter making the host calls
// diana.wasm makes for one per-IP rule, and nothing else.
var compiledHostCalls = sync.OnceValues(func() ([]byte, error) { return tinygoBuild("./testdata/hostcalls") })

// tinygoBuild compiles the package in dir to wasm as make wasm does.
func tinygoBuild(dir string) ([]byte, error) {
	out, err := os.MkdirTemp("", "diana-wasm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	tinygo, err := exec.Command("../build/tinygo.sh").Output()
	if err != nil {
		return nil, &buildError{"build/tinygo.sh", err}
	}
	wasm := filepath.Join(out, "diana.wasm")
	cmd := exec.Command(strings.TrimSpace(string(tinygo)), "build", "-o", wasm,
		"-scheduler=none", "-target=wasip1", "-buildmode=wasi-legacy", "-no-debug", dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, &buildError{"tinygo build " + dir + ": " + string(b), err}
	}
	return os.ReadFile(wasm)
}

type buildError struct {
	what string
	err  error
}

func (e *buildError) Error() string {
	if ee, ok := e.err.(*exec.ExitError); ok {
		return e.what + ": " + e.err.Error() + ": " + string(ee.Stderr)
	}
	return e.what + ": " + e.err.Error()
}

// wasmVM returns a VM running the compiled diana.wasm in wazero.
func wasmVM(t testing.TB) proxytest.WasmVMContext {
	t.Helper()
	return loadVM(t, compiled)
}

// loadVM returns a VM running the module build gives.
func loadVM(t testing.TB, build func() ([]byte, error)) proxytest.WasmVMContext {
	t.Helper()
	b, err := build()
	if err != nil {
		t.Fatalf("building the module: %v", err)
	}
	vm, err := proxytest.NewWasmVMContext(b)
	if err != nil {
		t.Fatalf("loading diana.wasm: %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

// runners are the two ways every main scenario runs: the filter in Go, and compiled.
var runners = []struct {
	name string
	vm   func(t testing.TB) types.VMContext
}{
	{"go", func(testing.TB) types.VMContext { return &vmContext{} }},
	{"wasm", func(t testing.TB) types.VMContext { return wasmVM(t) }},
}

// emu is a started emulator. The emulator is a process-wide singleton: no t.Parallel here.
type emu struct {
	proxytest.HostEmulator
	t testing.TB
}

// start starts vm with the plugin configuration cfg and fails the test unless it starts.
func start(t testing.TB, vm types.VMContext, cfg string) *emu {
	t.Helper()
	e, st := tryStart(t, vm, cfg)
	if st != types.OnPluginStartStatusOK {
		t.Fatalf("plugin did not start: %q", e.GetCriticalLogs())
	}
	return e
}

func tryStart(t testing.TB, vm types.VMContext, cfg string) (*emu, types.OnPluginStartStatus) {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration([]byte(cfg)).
		WithProperty([]string{"source", "address"}, []byte("192.0.2.1:40000"))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := host.StartVM(); st != types.OnVMStartStatusOK {
		t.Fatalf("StartVM: %v", st)
	}
	return &emu{host, t}, host.StartPlugin()
}

// from sets the client's source.address.
func (e *emu) from(addr string) *emu {
	e.t.Helper()
	if err := e.SetProperty([]string{"source", "address"}, []byte(addr)); err != nil {
		e.t.Fatal(err)
	}
	return e
}

// result is what the client saw of one request.
type result struct {
	id      uint32
	action  types.Action
	status  uint32 // of the local reply; 0 when the request went on
	headers map[string]string
	body    string
}

// request sends GET path with the extra headers (name, value, ...), and, when the filter let
// it through, a 200 response.
func (e *emu) request(path string, kv ...string) result {
	e.t.Helper()
	id := e.InitializeHttpContext()
	hdrs := [][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.com"}}
	for i := 0; i+1 < len(kv); i += 2 {
		hdrs = append(hdrs, [2]string{kv[i], kv[i+1]})
	}
	r := result{id: id, action: e.CallOnRequestHeaders(id, hdrs, true)}
	return e.finish(r)
}

// finish completes a request whose headers were handled (or whose callout was answered).
func (e *emu) finish(r result) result {
	e.t.Helper()
	if lr := e.GetSentLocalResponse(r.id); lr != nil {
		r.status, r.headers, r.body = lr.StatusCode, toMap(lr.Headers), string(lr.Data)
		e.CompleteHttpContext(r.id)
		return r
	}
	if r.action == types.ActionPause && e.GetCurrentHttpStreamAction(r.id) == types.ActionPause {
		return r // waiting for a callout
	}
	e.CallOnResponseHeaders(r.id, [][2]string{{":status", "200"}}, true)
	r.headers = toMap(e.GetCurrentResponseHeaders(r.id))
	e.CompleteHttpContext(r.id)
	return r
}

func toMap(h [][2]string) map[string]string {
	m := map[string]string{}
	for _, kv := range h {
		if strings.HasPrefix(kv[0], ":") {
			continue
		}
		m[strings.ToLower(kv[0])] = kv[1]
	}
	return m
}

// counter returns a metric's value (0 if it was never defined).
func (e *emu) counter(name string) uint64 {
	v, _ := e.GetCounterMetric(name)
	return v
}
