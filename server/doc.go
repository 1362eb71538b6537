// Package server is dianad: Diana's rate-limiting reverse proxy and decision service, built on
// the httplimit middleware and the rules engine. Its listeners bound their connections as nginx
// does (conns.go for HTTP, grpcconns.go for gRPC); the admin listener needs a token unless it
// listens on loopback or the operator says otherwise (admin.allow_unauthenticated).
//
// The files, by job: config.go reads a dianad document; server.go starts and stops the listeners
// and holds the running config (live, one snapshot per request); reload.go swaps it; proxy.go
// routes a request to its upstream and limits it on the way (docs/architecture.md walks one);
// check.go, auth.go and settle.go are the decision API, forward auth and the settlement of
// usage tickets; rls.go and rlqs.go serve Envoy's rate limit service and quota service over the
// rls and rlqs packages; admin.go the admin operations; metrics.go the metrics; conns.go and
// grpcconns.go the listeners' caps.
//
// Why one package: every one of these serves the same running config (live) and its engine,
// store stack, logger and metrics, and they are swapped together on a reload; split, each would
// take that state back as parameters or callbacks. What is not dianad's own lives elsewhere: the
// middleware (httplimit), the engine (shared/rules), the stores (store/...), the RLS and RLQS
// protocols (rls, rlqs), the config file's syntax (config).
package server
