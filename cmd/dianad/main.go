// Command dianad is Diana's rate-limiting reverse proxy and decision service.
//
//	dianad [--config FILE] [--log-level debug|info|warn|error] [--log-format text|json]
//	dianad simulate [-out DIR] [-redis ADDR] [-seed N] [-quick] [-nodes N] [-parallel N]
//
// Without --config it runs the embedded demo config (examples/diana.yaml). The config file is
// re-read when it changes and on SIGHUP; SIGINT and SIGTERM shut down gracefully, letting the
// requests in flight finish. An invalid config at start prints its errors and exits with 1.
//
// The simulate subcommand writes the accuracy report (package sim): it replays request traces
// through every algorithm in local, cluster and batched modes and writes DIR/accuracy.md with
// SVG charts in DIR/img. Without -redis it starts a redis-server of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/examples"
	"github.com/diana-gw/diana/server"
	"github.com/diana-gw/diana/sim"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "simulate" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := sim.Main(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("dianad", flag.ContinueOnError)
	file := fs.String("config", "", "config `FILE` (YAML or JSON); default: the embedded demo config")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dianad: unexpected argument %q (the config is given with --config FILE)\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(*level, *format)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dianad:", err)
		return 2
	}

	redis.SetLogger(redisLog{logger})

	var cfg *server.Config
	if *file == "" {
		cfg, err = server.Parse([]byte(examples.DianaYAML), "embedded diana.yaml")
	} else if data, rerr := os.ReadFile(*file); rerr != nil {
		fmt.Fprintln(os.Stderr, "dianad: cannot read the config:", rerr)
		return 1
	} else {
		cfg, err = server.Parse(data, *file)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dianad: invalid config:\n%v\n", err)
		return 1
	}

	srv, err := server.New(cfg, server.Options{File: *file, Logger: logger})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			logger.Info("SIGHUP: reloading the config")
			srv.Reload()
		}
	}()
	if err := srv.Run(ctx); err != nil {
		logger.Error("stopped with an error", "err", err)
		return 1
	}
	return 0
}

// newLogger returns a logger writing to stderr at level, as text or JSON.
func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, o)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

// redisLog sends go-redis's own messages (dial failures while Redis is down, mostly) to the
// logger at debug level: dianad reports an outage itself, through the breaker's log lines and
// metrics.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
