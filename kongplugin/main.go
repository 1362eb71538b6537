// Command diana is Diana's Kong plugin: a go-pdk plugin server that Kong starts once per node
// and asks, over a unix socket, to decide every request against the rate limits of its plugin
// instances. The binary must be named diana: Kong and go-pdk take the plugin's name, and the
// socket's, from the executable's file name.
//
//	diana -kong-prefix /usr/local/kong   serve Kong on /usr/local/kong/diana.socket
//	diana -dump                          print the plugin info and schema Kong asks for
//	diana -no-log-phase ...              without Kong's log phase (no concurrency limits), in
//	                                     start_cmd and query_cmd alike: one event less per request
//
// Limits in policy local live in this process, so every nginx worker of the node shares them
// (as Kong's own local policy); policy redis shares them across nodes through Redis.
package main

import (
	"bytes"
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/Kong/go-pdk/server"
)

func main() {
	// go-pdk registers -kong-prefix and -dump on the default flag set; its own -dump derives
	// the schema by reflection, which cannot say defaults, enums or bounds, so answer it here.
	noLog := flag.Bool("no-log-phase", false, "declare no log phase: Kong sends one event less per request; concurrency limits are refused")
	flag.Parse()
	logPhase = !*noLog
	log.SetOutput(quietExits{})
	if flag.Lookup("dump").Value.String() == "true" {
		b, err := dumpInfo(socketPath())
		if err != nil {
			log.Fatalf("diana: %v", err)
		}
		os.Stdout.Write(b)
		return
	}
	go closeOnSignal()
	if err := server.StartServer(New, Version, Priority); err != nil {
		log.Fatalf("diana: %v", err)
	}
}

// socketPath is where go-pdk listens: <kong-prefix>/<executable name>.socket.
func socketPath() string {
	name := "diana"
	if exe, err := os.Executable(); err == nil {
		name = filepath.Base(exe)
	}
	return filepath.Join(flag.Lookup("kong-prefix").Value.String(), name+".socket")
}

// quietExits drops the line go-pdk logs after every kong.response.exit (it closes the
// connection, then fails to write the end of the event on it), which would otherwise fill
// Kong's error log with one line per refused request.
type quietExits struct{}

func (quietExits) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("use of closed network connection")) {
		return len(b), nil
	}
	return os.Stderr.Write(b)
}
