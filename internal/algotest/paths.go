package algotest

// LoginSpellings are ways to write /api/login that common upstreams route to /api/login: the
// front ends' tests send each to a rule on /api/login and require that every one counts.
var LoginSpellings = []string{
	"/api/login",
	"/api//login",
	"//api/login",
	"/x/../api/login",
	"/api/./login",
	"/api/%2e%2e/api/login",
	"/api/.%2E/api/login",
	"/api/log%69n",
	"/%61pi/login",
	"/api/login/",
	"/api/login?next=/",
	"/api/login;jsessionid=0",
	"/api;v=1/login",
	"/public/..;/api/login",
	"/api%2Flogin",
	"/api%5clogin",
}
