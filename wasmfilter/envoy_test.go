package main

import (
	"strings"
	"testing"

	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/diana-gw/diana/internal/envoytest"
)

// examples/envoy.yaml is a valid bootstrap, every nested typed config (the HTTP connection
// manager, the filters, the per-route configs, the wasm PluginConfigs) is valid too, and each
// diana filter's configuration is one this filter accepts.
func TestEnvoyExample(t *testing.T) {
	b := envoytest.Bootstrap(t, "../examples/envoy.yaml")
	clusters := map[string]bool{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	var filters []*wasmfilterv3.Wasm
	walk(t, "bootstrap", b.ProtoReflect(), func(m proto.Message) {
		if w, ok := m.(*wasmfilterv3.Wasm); ok {
			filters = append(filters, w)
		}
	})
	if len(filters) != 2 {
		t.Fatalf("%d wasm filters, want 2 (local and cluster mode)", len(filters))
	}
	modes := map[string]bool{}
	for _, w := range filters {
		pc := w.GetConfig()
		vm := pc.GetVmConfig()
		if vm.GetVmId() != "diana" || !strings.HasSuffix(vm.GetCode().GetLocal().GetFilename(), "/diana.wasm") {
			t.Errorf("%s: vm_id %q, code %v: want vm_id diana and diana.wasm", pc.GetName(), vm.GetVmId(), vm.GetCode())
		}
		var sv wrapperspb.StringValue
		if err := pc.GetConfiguration().UnmarshalTo(&sv); err != nil {
			t.Fatalf("%s: configuration must be a StringValue: %v", pc.GetName(), err)
		}
		cfg, err := parseConfig([]byte(sv.GetValue()))
		if err != nil {
			t.Fatalf("%s: %v", pc.GetName(), err)
		}
		if cfg.cluster != nil {
			modes["cluster"] = true
			if !clusters[cfg.cluster.name] {
				t.Errorf("%s: cluster %q is not in static_resources.clusters", pc.GetName(), cfg.cluster.name)
			}
		} else {
			modes["local"] = true
		}
	}
	if !modes["local"] || !modes["cluster"] {
		t.Errorf("modes %v, want a local-mode and a cluster-mode filter", modes)
	}
}

// walk validates every Any below m (go-control-plane's ValidateAll does not look inside them),
// recursively, and calls found with each unpacked message.
func walk(t *testing.T, path string, m protoreflect.Message, found func(proto.Message)) {
	t.Helper()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if v, ok := inner.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s (%s): %v", path, a.GetTypeUrl(), err)
			}
		}
		found(inner)
		walk(t, path+"("+a.GetTypeUrl()+")", inner.ProtoReflect(), found)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				walk(t, p, v.List().Get(i).Message(), found)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(t, p+"["+k.String()+"]", mv.Message(), found)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walk(t, p, v.Message(), found)
		}
		return true
	})
}
