package main

import (
	"bytes"
	"log"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/Kong/go-pdk"

	"github.com/diana-gw/diana/shared/rules"
)

// A line without an event's PDK goes to standard error, its template filled (a value holding
// braces as written, braces naming no attribute too), an attribute with no place in it added
// as key=value.
func TestKongLogStandardError(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	newLog().Warn("diana: plugin {plugin}: {test} line ({suppressed} more since the last line)", "plugin", "p{extra}", "extra", 7)
	if want := "diana: plugin p{extra}: {test} line (0 more since the last line) extra=7\n"; !strings.HasSuffix(buf.String(), want) {
		t.Errorf("logged %q, want it to end with %q", buf.String(), want)
	}
}

// The shadow line of a request over a shadow rule, held back, allocates nothing: every request
// over the rule passes there.
func TestHeldBackLineAllocs(t *testing.T) {
	c := newConfig(t, map[string]any{"limit": 1, "shadow": true})
	mustValid(t, c)
	var logs []string
	for range 2 { // the second is over the limit: its shadow line is logged
		logs = append(logs, event(t, c, "access", &kongReq{IP: "192.0.2.70"}).Logs...)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "shadow rule") {
		t.Fatalf("two requests, one over a shadow limit, logged %q; want its shadow line", logs)
	}
	a, b := net.Pipe()
	b.Close() // a line let through fails at once (and allocates), rather than wait for Kong
	defer a.Close()
	kong := pdk.Init(a)
	in := rules.Input{ClientIP: "192.0.2.70"}
	res := rules.Result{Shadow: c.s.Rules[0]}
	if n := testing.AllocsPerRun(100, func() { c.logUnlimited(kong, &in, &res) }); n != 0 {
		t.Errorf("a shadow line held back: %v allocations, want 0", n)
	}
}
