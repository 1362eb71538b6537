package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/diana-gw/diana/server"
)

// The environment of a child process running one of this program's Go servers.
const (
	roleEnv     = "DIANA_PROXYLOAD_ROLE"     // upstream, plain or pooled
	listenEnv   = "DIANA_PROXYLOAD_LISTEN"   // host:port
	upstreamEnv = "DIANA_PROXYLOAD_UPSTREAM" // the proxies' upstream URL
)

// serveRole runs the Go server that roleEnv names, if any, and exits; it returns without one.
// The upstream and the Go proxies run as child processes of this program, as dianad and nginx
// do, so that no two share a heap or a garbage collector.
func serveRole() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	err := serve(role, os.Getenv(listenEnv), os.Getenv(upstreamEnv))
	fmt.Fprintf(os.Stderr, "proxyload %s: %v\n", role, err)
	os.Exit(1)
}

// upstreamBody is what the upstream answers: a small JSON body, as an API would.
const upstreamBody = `{"ok":true}` + "\n"

// serve runs the server of role on listen until the process is stopped:
//   - upstream: answers every request with upstreamBody;
//   - plain: the anchor, an httputil.ReverseProxy to upstream with dianad's transport and
//     rewrite (server.NewTransport, server.Rewrite) and the zero BufferPool, as a plain
//     ReverseProxy has (each response copied through a new 32 KiB buffer);
//   - pooled: the same with dianad's pool of copy buffers (server.BufferPool), so that the
//     difference to dianad is the limiting alone.
//
// Each has dianad's server settings (server/server.go).
func serve(role, listen, upstream string) error {
	var h http.Handler
	switch role {
	case "upstream":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, upstreamBody)
		})
	case "plain", "pooled":
		target, err := url.Parse(upstream)
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		rp := &httputil.ReverseProxy{Rewrite: server.Rewrite(target), Transport: server.NewTransport()}
		if role == "pooled" {
			rp.BufferPool = server.BufferPool()
		}
		h = rp
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	return srv.Serve(ln)
}

// proc is a child process: a server this program started and stops.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string // the file of its output
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs bin with args and env (added to this process's) in dir, its output in
// dir/name.log, and returns once addr accepts connections. The child is in a process group of
// its own (stop ends its workers too) and gets SIGTERM if this program dies.
func start(dir, name, addr string, env []string, bin string, args ...string) (*proc, error) {
	logFile := filepath.Join(dir, name+".log")
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() { cmd.Wait(); out.Close(); close(p.done) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before listening on %s (%v): %s", name, addr, cmd.ProcessState, p.output())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s not listening on %s after 20s: %s", name, addr, p.output())
		}
	}
}

// output is the end of the process's output, for errors.
func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	b = b[max(len(b)-2000, 0):]
	return strings.TrimSpace(string(b))
}

// stop ends the process and its group: SIGTERM, then SIGKILL after 5 s.
func (p *proc) stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// cpu returns the CPU time (user and system) the process and its children (nginx's workers)
// have used so far, from /proc.
func (p *proc) cpu() (time.Duration, error) {
	pid := p.cmd.Process.Pid
	total, _, err := procStat(strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if t, ppid, err := procStat(e.Name()); err == nil && ppid == pid {
			total += t
		}
	}
	return total, nil
}

// procStat returns the CPU time and the parent of process pid, from /proc/pid/stat (in clock
// ticks of 1/100 s, USER_HZ on Linux).
func procStat(pid string) (time.Duration, int, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command, which is in parentheses and may hold spaces: state (3),
	// ppid (4), ..., utime (14), stime (15).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, 0, errors.New("/proc/" + pid + "/stat: unexpected format")
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, ppid, nil
}

// nginxConf is nginx's config as a reference proxy (%[1]s: its directory, %[2]s: its
// address, %[3]s: the upstream's address): two workers, keep-alive connections to the upstream,
// X-Forwarded-For appended as dianad does, no access log (dianad logs none by default).
const nginxConf = `worker_processes 2;
error_log %[1]s/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream up {
    server %[3]s;
    keepalive 512;
  }
  server {
    listen %[2]s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`

// nginxPath returns nginx's path, "" if it is not installed (Debian puts it in /usr/sbin, which
// a user's PATH may lack).
func nginxPath() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}
