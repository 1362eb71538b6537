package main

import (
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
)

// summary logs events of one kind so that a flood of them cannot flood Envoy's log: the first
// since the last tick at once, the rest as one line at the next tick, with their count and the
// last one. Every request the filter lets through unlimited (a failed callout under
// on_failure: open, a local reply the host refused, a shadow denial) goes through one.
type summary struct {
	what   string // the kind, e.g. "cluster mode: callout failed"
	logged bool   // an event was logged at once since the last tick
	more   int    // events since, not logged
	last   string // the last of them
}

func (s *summary) add(event string) {
	if !s.logged {
		s.logged = true
		proxywasm.LogWarn("diana.wasm: " + s.what + ": " + event)
		return
	}
	s.more++
	s.last = event
}

// tick logs the events held back since the last tick.
func (s *summary) tick(periodMS int) {
	if s.more > 0 {
		proxywasm.LogWarn("diana.wasm: " + s.what + ": " + strconv.Itoa(s.more) + " more in the last " +
			strconv.Itoa(periodMS/1000) + " s; the last: " + s.last)
	}
	s.logged, s.more, s.last = false, 0, ""
}
