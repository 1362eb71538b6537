package main

import (
	"errors"

	"github.com/diana-gw/diana/store/slotstore"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// hostData is the host's shared data as the slot store sees it (store/slotstore): one
// key-value store per vm_id, shared by every Envoy worker thread, with compare-and-swap.
type hostData struct{}

func (hostData) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	return v, cas, slotErr(err)
}

func (hostData) Set(key string, v []byte, cas uint32) error {
	return slotErr(proxywasm.SetSharedData(key, v, cas))
}

// slotErr maps the host's statuses to the slot store's errors.
func slotErr(err error) error {
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		return slotstore.ErrNotFound
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return slotstore.ErrCasMismatch
	}
	return err
}
