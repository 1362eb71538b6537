package main

import (
	"context"
	"os"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

func TestRun(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	b, _ := os.ReadFile("/tmp/prof.wasm")
	_, err := r.InstantiateWithConfig(ctx, b, wazero.NewModuleConfig().WithStdout(os.Stdout).WithStderr(os.Stderr).WithSysNanotime().WithSysWalltime())
	if err != nil {
		t.Log(err)
	}
}
