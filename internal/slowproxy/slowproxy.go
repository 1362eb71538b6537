// Package slowproxy is a TCP proxy for tests of a slow dependency: it forwards bytes both ways
// between its clients and one target address, and delays every byte the target sends back by a
// delay that can be changed while connections are open.
//
// The delay is added to each reply on its way, not to the connection as a whole: replies to
// pipelined requests are delayed once each, not one after the other, as from a server that is
// far away rather than one that is busy. Requests reach the target at once.
package slowproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a running proxy. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration

	done   chan struct{} // closed by Close: delayed bytes stop waiting
	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection
	closed bool
	wg     sync.WaitGroup
}

// New starts a proxy on a free loopback port that forwards every connection it accepts to
// target (host:port), with no delay until SetDelay.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slowproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of the bytes read from the target from now on; bytes already read
// keep theirs. A negative delay counts as 0.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Delay returns the current delay.
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Close stops accepting connections, closes every open one (bytes still delayed are dropped)
// and waits for the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track records c as open, or closes it and returns false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: try again
			continue
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// chunk is a read from the target, due to the client at due.
type chunk struct {
	b   []byte
	due time.Time
}

// serve forwards one client connection. The target's bytes go through a queue, so that reading
// them (and stamping their due time) never waits for the delay of the bytes before them.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(server) {
		p.untrack(client) // the client sees its connection closed, as if the target had refused it
		return
	}
	defer p.untrack(client, server)

	var inner sync.WaitGroup
	inner.Add(2)
	go func() { // client → target, at once
		defer inner.Done()
		io.Copy(server, client)
		// The client is done sending, or gone: let the target see the end of its requests.
		if tc, ok := server.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	queue := make(chan chunk, 256)
	go func() { // target → queue
		defer inner.Done()
		defer close(queue)
		for {
			b := make([]byte, 32<<10)
			n, err := server.Read(b)
			if n > 0 {
				queue <- chunk{b[:n], time.Now().Add(p.Delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
forward:
	for ch := range queue { // queue → client, each chunk when due
		if d := time.Until(ch.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-p.done:
				break forward
			}
		}
		if _, err := client.Write(ch.b); err != nil {
			break
		}
	}
	// The target closed (or the client failed): close both, which ends the copy loops.
	client.Close()
	server.Close()
	for range queue { // let the reader finish if it was blocked on a full queue
	}
	inner.Wait()
}
