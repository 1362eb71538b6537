package redistest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// docACL starts the least-privilege user's line in docs/redis.md.
const docACL = "ACL SETUSER diana on >secret resetkeys "

// DocUser is the least-privilege ACL user that docs/redis.md tells operators to create, as
// Options.Users takes it (the doc's ACL SETUSER line without "ACL SETUSER"), its password
// "secret": tests run as the user the docs give, not as a copy of its rules.
func DocUser(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	doc := filepath.Join(filepath.Dir(file), "..", "..", "docs", "redis.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, docACL) {
			return strings.TrimPrefix(strings.TrimSpace(line), "ACL SETUSER ")
		}
	}
	t.Fatalf("%s: no line starts with %q", doc, docACL)
	return ""
}

// DocCommands are the commands DocUser may run (its +name rules), lower case.
func DocCommands(t testing.TB) []string {
	var cmds []string
	for _, f := range strings.Fields(DocUser(t)) {
		if name, ok := strings.CutPrefix(f, "+"); ok {
			cmds = append(cmds, strings.ToLower(name))
		}
	}
	return cmds
}

// StartAs starts a server whose ACL holds user, as Options.Users takes it ("name on >password
// rules..."), and returns a client logged in as that user, closed when the test ends.
func StartAs(t testing.TB, user string) *redis.Client {
	t.Helper()
	srv := StartWith(t, Options{Users: []string{user}})
	o := srv.Options()
	o.Username, o.Password = strings.Fields(user)[0], ""
	for _, f := range strings.Fields(user) {
		if p, ok := strings.CutPrefix(f, ">"); ok {
			o.Password = p
			break
		}
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}
