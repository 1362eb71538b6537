package server

import (
	"net"
	"strings"
	"testing"
)

// A server that cannot start returns its error; it never panics while cleaning up (it did when
// the listen address was taken).
func TestNewFailsCleanly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err := Parse([]byte("version: 1\nlisten: "+taken.Addr().String()+"\n"), "taken.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err == nil || s != nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("New on a taken address: %v, %v; want an error naming the listen", s, err)
	}
}
