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
		h = append(h, [2]string{strings.ToLower(x.Name), x.Value})
	}
	return h
}
