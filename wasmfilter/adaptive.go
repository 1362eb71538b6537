package main

import (
	"context"
	"strconv"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/slotstore"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
)

// localStore decides the local rules of a filter with adaptive rules: those in States (their
// state is a list of words, kept whole under a key per identity), the others in slots.
// Filters without adaptive rules use the slot store alone.
type localStore struct {
	slots  *slotstore.Store
	states *slotstore.States
	one    [1]*rules.Op
}

func (l *localStore) Decide(ctx context.Context, ops []*rules.Op) {
	for _, op := range ops {
		l.one[0] = op
		if op.Alg.Script().Log {
			l.states.Decide(ctx, l.one[:])
		} else {
			l.slots.Decide(ctx, l.one[:])
		}
	}
	l.one[0] = nil
}

// keepsLists reports whether one of rs keeps a list state (adaptive; the config refuses the
// others), which needs the States store.
func keepsLists(rs []*rules.Rule) bool {
	for _, r := range rs {
		if r.Alg != nil && r.Alg.Script().Log {
			return true
		}
	}
	return false
}

// holding is the local rules' verdict on a request that holds leases (adaptive slots), kept until
// the request ends (finish), or given back at once if it is denied (release).
type holding struct {
	res   rules.Result
	sent  bool  // the request was let through
	start int64 // when it was let through (µs)
}

// responseStatus reads the response's :status from the host.
func responseStatus() string {
	v, _ := proxywasm.GetHttpResponseHeader(":status")
	return v
}

// finish reports how a request that holds leases ended, once its response headers came: its
// latency from when the filter let it through to now, and, for a 5xx status (Envoy's own 503
// and 504 for a failed or timed-out upstream included), that it was dropped. Requests without
// leases make no host call here.
func (h *httpContext) finish() {
	if h.held == nil {
		return
	}
	if !h.held.sent { // answered before it went on (a reply of Envoy's while it waited for dianad)
		h.release()
		return
	}
	status, _ := strconv.Atoi(h.p.status())
	dropped := rules.Dropped(status)
	latency := max(h.p.now()-h.held.start, 1) // measured: 0 would mean not
	res := &h.held.res
	h.held = nil
	h.p.local.Finish(context.Background(), res, latency, dropped)
}

// release gives back the leases of a request that ends without its response headers (denied,
// or reset): latency 0, not dropped, so that nothing is learned and no slot is kept.
func (h *httpContext) release() {
	if h.held == nil {
		return
	}
	res := &h.held.res
	h.held = nil
	h.p.local.Release(context.Background(), res)
}

// OnHttpStreamDone releases what a request still holds (a stream reset before the response) and
// settles its usage rules (see usage.go).
func (h *httpContext) OnHttpStreamDone() {
	h.release()
	h.settle()
}
