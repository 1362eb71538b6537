// Command dianad is Diana's rate-limiting reverse proxy and decision service.
//
//	dianad [--config FILE] [--log-level debug|info|warn|error] [--log-format text|json]
//	dianad validate FILE     check a config file, as nginx -t does, and exit
//	dianad version           print the version (also --version)
//	dianad help              print this usage (also --help, -h)
//
// Without --config it runs the embedded demo config (examples/diana.yaml). The config file is
// re-read when it changes and on SIGHUP; SIGINT and SIGTERM shut down gracefully, letting the
// requests in flight finish. An invalid config at start prints its errors and exits with 1.
// The accuracy report's simulator is a command of its own, cmd/dianasim.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/examples"
	"github.com/diana-gw/diana/internal/gcfloor"
	"github.com/diana-gw/diana/server"
)

func main() { os.Exit(dianad(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage:
  dianad [--config FILE] [--log-level LEVEL] [--log-format FORMAT]
                           run the proxy and decision service (default: the embedded demo config)
  dianad validate FILE     check a config file: every error with its field, exit 1 if any
  dianad version           print the version (also --version)
  dianad help              print this help (also --help, -h)

flags of the service:
`

// dianad runs the command line args and returns the exit code: 0 done, 1 failed, 2 misused.
func dianad(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "validate":
			if len(args) != 2 {
				fmt.Fprintln(stderr, "usage: dianad validate FILE")
				return 2
			}
			return validate(args[1], stdout, stderr)
		case "version", "--version", "-version":
			fmt.Fprintln(stdout, version())
			return 0
		case "help":
			args = []string{"--help"}
		}
	}
	return run(args, stdout, stderr)
}

// validate checks the config file name as dianad would load it at start.
func validate(name string, stdout, stderr io.Writer) int {
	data, err := config.ReadFile(name)
	if err == nil {
		_, err = server.Parse(data, name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: the config is valid\n", name)
	return 0
}

// version is the module's version and the commit it was built from, from the build info.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dianad (no build information)"
	}
	v := "dianad " + bi.Main.Version
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		v += " (commit " + rev + " of " + at + dirty + ")"
	}
	return v + ", " + bi.GoVersion
}

// heapFloor is how much dianad's heap may grow between collections however little it keeps
// (docs/configuration.md, "Memory per key").
const heapFloor = 64 << 20

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dianad", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	file := fs.String("config", "", "config `FILE` (YAML or JSON); default: the embedded demo config")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dianad: unexpected argument %q (the config is given with --config FILE; see dianad help)\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(*level, *format, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "dianad:", err)
		return 2
	}

	redis.SetLogger(redisLog{logger})
	gcfloor.Keep(heapFloor)

	var cfg *server.Config
	if *file == "" {
		cfg, err = server.Parse([]byte(examples.DianaYAML), "embedded diana.yaml")
	} else if data, rerr := config.ReadFile(*file); rerr != nil {
		fmt.Fprintln(stderr, "dianad: cannot read the config:", rerr)
		return 1
	} else {
		cfg, err = server.Parse(data, *file)
	}
	if err != nil {
		fmt.Fprintf(stderr, "dianad: invalid config:\n%v\n", err)
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
	logger.Info("starting", "version", version())
	if err := srv.Run(ctx); err != nil {
		logger.Error("stopped with an error", "err", err)
		return 1
	}
	return 0
}

// newLogger returns a logger writing to w at level, as text or JSON.
func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
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
