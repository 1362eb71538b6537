// Package gatewaytest starts real gateways for tests: nginx and Caddy, from Debian's packages,
// each on a free loopback port with the config the test gives, stopped when the test ends.
//
// A missing program fails the test: it never skips, so CI cannot pass without the gateways
// (make test installs them: build/need-packages.sh).
package gatewaytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
)

// startTimeout bounds the wait for a gateway to listen.
const startTimeout = 20 * time.Second

// Nginx runs nginx with conf(port), a whole nginx.conf whose server listens on
// 127.0.0.1:port, a free port, and returns the port once it accepts connections. The process
// runs in the foreground in a directory of its own: its pid file, temporary files and logs
// (error.log, access.log) are there, and the logs are in the test's output if it fails.
func Nginx(t testing.TB, conf func(port int) string) int {
	t.Helper()
	return onFreePort(t, func(port int) (string, error) { return nginx(t, conf(port), port) })
}

func nginx(t testing.TB, conf string, port int) (string, error) {
	t.Helper()
	dir := t.TempDir()
	// Test-only settings: nothing written outside dir. The http block's first lines.
	var local strings.Builder
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		local.WriteString(d + "_temp_path " + filepath.Join(dir, d) + ";\n")
	}
	local.WriteString("access_log " + filepath.Join(dir, "access.log") + ";\n")
	conf = strings.Replace(conf, "http {", "http {\n"+local.String(), 1)
	global := "daemon off; pid " + filepath.Join(dir, "nginx.pid") + ";"
	if os.Geteuid() == 0 {
		global += " user root;" // workers as nobody could not use dir
	}
	file := filepath.Join(dir, "nginx.conf")
	write(t, file, conf)
	return run(t, dir, port, []string{"error.log", "access.log"},
		"nginx", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", file, "-g", global)
}

// Caddy runs caddy with caddyfile(port), whose site listens on 127.0.0.1:port, a free port,
// and returns the port once it accepts connections. Its admin API is off (tests run side by
// side) and its data and config directories are a directory of its own.
func Caddy(t testing.TB, caddyfile func(port int) string) int {
	t.Helper()
	return onFreePort(t, func(port int) (string, error) {
		dir := t.TempDir()
		file := filepath.Join(dir, "Caddyfile")
		write(t, file, "{\n\tadmin off\n}\n\n"+caddyfile(port))
		return run(t, dir, port, []string{"caddy.log"}, "caddy", "run", "--adapter", "caddyfile", "--config", file)
	})
}

// startAttempts bounds the starts of a gateway whose port another process took between
// FreePort and the gateway's bind.
const startAttempts = 5

// onFreePort calls start with a free port until the gateway it starts listens there: a port is
// free when FreePort returns it, but another process may bind it before the gateway does, which
// then exits saying so (its log, which start returns with the error).
func onFreePort(t testing.TB, start func(port int) (string, error)) int {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := redistest.FreePort(t)
		log, err := start(port)
		if err == nil {
			return port
		}
		if attempt == startAttempts || !strings.Contains(log, "ddress already in use") {
			t.Fatalf("%v\n%s", err, log)
		}
	}
}

func write(t testing.TB, file, data string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// run starts bin with args in dir (its output in dir/<bin>.log), waits until port accepts
// connections, and stops it (and any worker it started) when the test ends. logs are the files
// of dir shown when the test fails. When bin exits before it listens, run returns why, with its
// logs.
func run(t testing.TB, dir string, port int, logs []string, bin string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/" + bin); serr != nil { // nginx's place, off a user's PATH
			t.Fatalf("%s is needed by this test and is not on PATH (make test installs it: build/need-packages.sh): %v", bin, err)
		}
		path = "/usr/sbin/" + bin
	}
	out, err := os.Create(filepath.Join(dir, bin+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its workers are stopped with it
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(done) }()
	read := func() string {
		var all strings.Builder
		for _, name := range append([]string{bin + ".log"}, logs...) {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && len(bytes.TrimSpace(b)) > 0 {
				fmt.Fprintf(&all, "%s %s:\n%s\n", bin, name, b)
			}
		}
		return all.String()
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Log(read())
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			return read(), fmt.Errorf("%s exited before listening on %s (%v)", bin, addr, cmd.ProcessState)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return "", nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after %v", bin, addr, startTimeout)
		}
	}
}
