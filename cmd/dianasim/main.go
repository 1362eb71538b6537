// Command dianasim writes Diana's accuracy report (package sim): it replays request traces
// through every algorithm in local, cluster, batched and failover modes and writes
// DIR/accuracy.json (every figure), DIR/accuracy.md (rendered from it) and SVG charts in DIR/img;
// with -readme FILE it also rewrites the report's quotes in FILE. Without -redis it starts a
// redis-server of its own. make report runs it.
//
//	dianasim [-out DIR] [-readme FILE] [-redis ADDR] [-seed N] [-quick] [-nodes N] [-pareto-clients N] [-parallel N]
//
// It is a command of its own so that the production binary, dianad, holds no simulator and no
// redis-server launcher.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/diana-gw/diana/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := sim.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
