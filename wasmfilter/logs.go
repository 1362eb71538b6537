// The filter's logs of the events a flood can repeat keep a scheme of their own rather than
// internal/lograte, the slog.Handler that dianad, the Kong plugin and the store stack share.
// log/slog builds under TinyGo, but grows diana.wasm by more than a filter that writes a few fixed
// lines would use of it, and the filter has what those front ends lack: the host's tick, in a VM
// that runs one callback at a time. So a summary needs no clock or atomics, and logs the count
// held back, with the last event, at the next tick even when the flood has stopped (lograte tells
// the count with the next line of its kind only). The limit is the same: at most one line of a
// kind per period, every event counted in the metrics.

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
