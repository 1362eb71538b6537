package main

import "testing"

// requestMethod sends method path, as request sends GET.
func (e *emu) requestMethod(method, path string) result {
	e.t.Helper()
	id := e.InitializeHttpContext()
	hdrs := [][2]string{{":method", method}, {":path", path}, {":authority", "example.com"}}
	return e.finish(result{id: id, action: e.CallOnRequestHeaders(id, hdrs, true)})
}

// The filter sees methods as the shared rules do (issue 25, items 1 and 2): "post" spends a rule
// on POST, HEAD a rule on GET; a control character in the path is a local 400 (item 8);
// strip_trailing_dots_spaces counts /login. as /login. In Go and in the compiled diana.wasm.
func TestMethodsAndPathEdges(t *testing.T) {
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), `{"strip_trailing_dots_spaces": true, "rules": [
				{"name": "post", "match": {"methods": ["POST"], "paths": ["/p"]}, "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
				{"name": "get", "match": {"methods": ["GET"], "paths": ["/g"]}, "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
				{"name": "login", "match": {"paths": ["/login"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
			e.from("192.0.2.7:1")
			for _, s := range []struct {
				method, path string
				status       uint32
			}{
				{"POST", "/p", 0}, {"post", "/p", 0}, {"Post", "/p", 429},
				{"GET", "/g", 0}, {"HEAD", "/g", 0}, {"head", "/g", 429},
				{"GET", "/login%00", 400}, {"GET", "/login%09", 400}, {"GET", "/a%0a/login", 400}, {"GET", "/login%7f", 400},
				{"GET", "/login", 0}, {"GET", "/login.", 429}, {"GET", "/login%20", 429}, {"GET", "/login%2E", 429},
			} {
				if r := e.requestMethod(s.method, s.path); r.status != s.status {
					t.Errorf("%s %s: status %d, want %d (0: let through)", s.method, s.path, r.status, s.status)
				}
			}
		})
	}
}
