package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Operators' operations (dianad's admin API): they change what an identity is held to outside
// the scripts, so they are not for the request path. Each is one round trip per key, or a SCAN.

// Reset deletes the state and the ban of key: the identity starts afresh on every node. It
// reports whether Redis held either.
func (s *Store) Reset(ctx context.Context, key string) (bool, error) {
	state, ban := s.Keys(key)
	n, err := s.c.Del(ctx, state, ban).Result() // one hash tag: one slot, also on a Cluster
	if err != nil {
		return false, fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	return n > 0, nil
}

// Unban deletes the ban of key and keeps its state: the algorithm carries on as it was. It
// reports whether a ban held.
func (s *Store) Unban(ctx context.Context, key string) (bool, error) {
	_, ban := s.Keys(key)
	n, err := s.c.Del(ctx, ban).Result()
	if err != nil {
		return false, fmt.Errorf("redisstore: unban %q: %w", key, err)
	}
	return n > 0, nil
}

// Banned is an identity under a ban, and the µs the ban still holds by Redis's clock.
type Banned struct {
	Key  string
	Left int64
}

// scanCount is the COUNT hint of each SCAN: keys looked at per round trip.
const scanCount = 1000

// Bans returns up to max identities that start with prefix, that match accepts (if not nil), and
// that a ban holds now, and whether there may be more. It SCANs the keyspace (every master of a Cluster), so it costs a round trip
// per 1,000 keys Redis holds: an operator's tool, not the request path's.
func (s *Store) Bans(ctx context.Context, prefix string, match func(key string) bool, max int) (bans []Banned, more bool, err error) {
	// Both forms of Keys start with the prefix, '{' and the identity's start; a '}' in the
	// identity's start is a ')' in the tag, and the exact test is on the identity read back.
	pattern := globEscape(s.o.Prefix+"{"+strings.ReplaceAll(prefix, "}", ")")) + "*:ban"
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		var found []string
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return err
			}
			found = append(found, keys...)
			if cursor = next; cursor == 0 || len(found) > max {
				break
			}
		}
		if cursor != 0 {
			mu.Lock()
			more = true // the SCAN stopped early
			mu.Unlock()
		}
		if len(found) == 0 {
			return nil
		}
		p := c.Pipeline()
		now := p.Time(ctx)
		ends := make([]*redis.StringCmd, len(found))
		for i, k := range found {
			ends[i] = p.Get(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		t := now.Val().UnixMicro()
		mu.Lock()
		defer mu.Unlock()
		for i, k := range found {
			id, ok := s.identity(k)
			end, err := strconv.ParseInt(ends[i].Val(), 10, 64)
			if !ok || err != nil || end <= t || !strings.HasPrefix(id, prefix) || match != nil && !match(id) {
				continue // not a ban key of ours, or a ban that ended since the SCAN
			}
			if len(bans) == max {
				more = true
				return nil
			}
			bans = append(bans, Banned{Key: id, Left: end - t})
		}
		return nil
	}
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else if c, ok := s.c.(*redis.Client); ok {
		err = scan(ctx, c)
	} else {
		err = fmt.Errorf("a %T cannot be scanned", s.c)
	}
	if err != nil {
		return nil, false, fmt.Errorf("redisstore: list bans of %q: %w", prefix, err)
	}
	return bans, more, nil
}

// identity reads the identity back from a ban key that Keys made.
func (s *Store) identity(banKey string) (string, bool) {
	k, ok := strings.CutPrefix(banKey, s.o.Prefix+"{")
	if !ok {
		return "", false
	}
	k, ok = strings.CutSuffix(k, ":ban")
	if !ok {
		return "", false
	}
	tag, rest, ok := strings.Cut(k, "}")
	switch {
	case !ok:
		return "", false
	case rest == "":
		return tag, true // the identity is the tag
	case strings.HasPrefix(rest, ":"):
		id := rest[1:]
		if st, _ := s.Keys(id); st == s.o.Prefix+"{"+tag+"}:"+id {
			return id, true
		}
	}
	return "", false
}

// globEscape escapes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
