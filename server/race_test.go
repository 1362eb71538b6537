//go:build race

package server

// raceEnabled: the race detector slows the proxy path about tenfold (see TestAdaptiveEndToEnd).
const raceEnabled = true
