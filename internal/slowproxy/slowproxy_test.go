package slowproxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
)

// The tests run a real redis-server behind the proxy.

func start(t *testing.T) (*Proxy, *redis.Client) {
	t.Helper()
	rs := redistest.Start(t)
	p, err := New(rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return p, c
}

func TestForwards(t *testing.T) {
	_, c := start(t)
	ctx := context.Background()
	big := strings.Repeat("diana", 200_000) // 1 MB: many reads, forwarded in order
	if err := c.Set(ctx, "k", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != big {
		t.Fatalf("GET through the proxy: %d bytes, %v; want the 1 MB written", len(got), err)
	}
}

func TestDelay(t *testing.T) {
	p, c := start(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // connected, undelayed
		t.Fatal(err)
	}

	const d = 100 * time.Millisecond
	p.SetDelay(d)
	if p.Delay() != d {
		t.Fatalf("Delay() = %v after SetDelay(%v)", p.Delay(), d)
	}
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("PING took %v with a delay of %v", took, d)
	}

	// Pipelined replies are each delayed once, not one after the other: 20 replies delayed
	// 200ms each would take 4s if the delays added up.
	p.SetDelay(200 * time.Millisecond)
	start = time.Now()
	pipe := c.Pipeline()
	for range 20 {
		pipe.Ping(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took >= 4*time.Second {
		t.Errorf("20 pipelined PINGs took %v with a delay of 200ms each, want from 200ms to well under 4s", took)
	}
}

// TestToggle changes the delay of open connections: a reply held back for an hour misses a
// deadline, and once the delay is off the same client is answered again (on a new connection,
// since go-redis drops one that timed out).
func TestToggle(t *testing.T) {
	p, c := start(t)
	p.SetDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered through a proxy delaying replies by an hour")
	}
	p.SetDelay(-time.Second)
	if p.Delay() != 0 {
		t.Errorf("Delay() = %v after a negative SetDelay, want 0", p.Delay())
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with the delay off: %v", err)
	}
}

// TestClose drops open connections, delayed bytes included, without waiting for their delay.
func TestClose(t *testing.T) {
	p, c := start(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(time.Hour)
	errc := make(chan error, 1)
	go func() { errc <- c.Ping(context.Background()).Err() }()
	time.Sleep(50 * time.Millisecond) // the PING's reply is probably held back by now
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Error("PING answered by a closed proxy")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request in flight was not failed by Close")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %v", took)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy accepts connections after Close")
	}
}

// TestTargetDown closes the client's connection when the target refuses it, as the target
// itself would.
func TestTargetDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	p, err := New(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte("PING\r\n"))
	b, err := conn.Read(make([]byte, 16))
	if err == nil {
		t.Fatalf("read %d bytes from a proxy whose target is down", b)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection stayed open although the target is down")
	}
}
