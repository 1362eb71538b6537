package main

import (
	"strings"

	"github.com/diana-gw/diana/shared/rules"
)

// appendHeaders appends the rate-limit headers of res (rules.Result.AppendHeaders), named in
// lower case as Envoy keeps them.
func appendHeaders(h [][2]string, res *rules.Result) [][2]string {
	var buf [6]rules.Header
	for _, x := range res.AppendHeaders(buf[:0]) {
		h = append(h, [2]string{lower(x.Name), x.Value})
	}
	return h
}

// lowerNames caches the header names rules write, in lower case, so that a request allocates
// none (an allocation costs TinyGo's collector more than Go's). The names come from the rules'
// replies, a handful per config; the bound only guards against a surprise. A VM runs one
// request at a time, so the map needs no lock.
var lowerNames = map[string]string{}

func lower(name string) string {
	l, ok := lowerNames[name]
	if !ok {
		l = strings.ToLower(name)
		if len(lowerNames) < 64 {
			lowerNames[name] = l
		}
	}
	return l
}
