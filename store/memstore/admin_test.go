package memstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// Reset starts an identity afresh; Unban lifts its ban and keeps its count; Bans lists the
// identities a ban holds, matched and bounded.
func TestAdmin(t *testing.T) {
	now := int64(1_000 * algos.Day)
	s := New(Options{Clock: func() int64 { return now }})
	inner, _ := algos.NewFixedWindow(2, algos.Minute)
	alg, _ := algos.NewBan(inner, algos.Hour)
	take := func(key string) algos.Decision { return s.Decide(key, alg, algos.Request{Cost: 1}) }
	for i := range 5 {
		for range 3 { // the third is denied and bans
			take(fmt.Sprintf("r|%d", i))
		}
	}
	take("other|0")
	take("other|0")
	take("other|0")
	take("r|free") // not banned

	bans, more := s.Bans(func(k string) bool { return strings.HasPrefix(k, "r|") }, 10)
	keys := make([]string, len(bans))
	for i, b := range bans {
		keys[i] = b.Key
		if b.Left != algos.Hour {
			t.Errorf("%s: left %d, want an hour", b.Key, b.Left)
		}
	}
	slices.Sort(keys)
	if want := []string{"r|0", "r|1", "r|2", "r|3", "r|4"}; !slices.Equal(keys, want) || more {
		t.Errorf("Bans = %v, %v; want %v", keys, more, want)
	}
	if bans, more := s.Bans(func(string) bool { return true }, 3); len(bans) != 3 || !more {
		t.Errorf("Bans with max 3: %d, more %v", len(bans), more)
	}

	if !s.Unban("r|0") || s.Unban("r|0") || s.Unban("r|free") || s.Unban("nobody") {
		t.Error("Unban: true once for a banned key, false otherwise")
	}
	if d := take("r|0"); d.Allowed { // unbanned, but its window is still spent
		t.Errorf("after Unban: %+v, want denied by the window", d)
	}
	if !s.Reset("r|1") || s.Reset("r|1") || s.Reset("nobody") {
		t.Error("Reset: true once for a held key, false otherwise")
	}
	if d := take("r|1"); !d.Allowed || d.Remaining != 1 {
		t.Errorf("after Reset: %+v, want a fresh window", d)
	}
	now += 2 * algos.Hour
	if bans, _ := s.Bans(func(string) bool { return true }, 10); len(bans) != 0 {
		t.Errorf("bans after they ended: %v", bans)
	}
}
