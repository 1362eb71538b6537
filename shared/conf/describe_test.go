package conf

import (
	"reflect"
	"regexp"
	"testing"
)

// TestDescribe: a reader described states each field it reads once, with its type, default,
// bounds and enum, nested objects and list items by path, and takes the branch of a field it
// asks about.
func TestDescribe(t *testing.T) {
	got := Describe(func(o *Obj) {
		o.Require("name")
		o.String("name", "")
		o.Int("cost", 1, 0, 10)
		o.Duration("ban", 0, 0, 1_000_000)
		o.EnumIndex("mode", "local", "cluster")
		o.Matching("listen", ":80", regexp.MustCompile(`^:[0-9]+$`), "a port")
		if o.Has("reply") { // described: taken
			r := o.Obj("reply")
			r.Bool("legacy", false)
			r.Done()
		}
		for _, u := range o.List("upstreams") {
			u.Strings("paths")
			u.StringsMatching("hosts", regexp.MustCompile(`^[a-z]+$`), "a name")
			u.StringMap("headers")
			u.Done()
		}
		o.Done()
	})
	want := []Field{
		{Path: "name", Type: "string", Default: "", Required: true},
		{Path: "cost", Type: "integer", Default: int64(1), Min: 0, Max: 10},
		{Path: "ban", Type: "duration", Default: "0s", Min: 0, Max: 1_000_000},
		{Path: "mode", Type: "string", Default: "local", Enum: []string{"local", "cluster"}},
		{Path: "listen", Type: "string", Default: ":80", Pattern: `^:[0-9]+$`},
		{Path: "reply", Type: "object", Closed: true},
		{Path: "reply.legacy", Type: "boolean", Default: false},
		{Path: "upstreams", Type: "list"},
		{Path: "upstreams[].paths", Type: "strings"},
		{Path: "upstreams[].hosts", Type: "strings", Pattern: `^[a-z]+$`},
		{Path: "upstreams[].headers", Type: "string_map"},
		{Path: "upstreams[]", Closed: true},
		{Path: "", Closed: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("described\n%+v\nwant\n%+v", got, want)
	}
}
