package memstore

import "hash/maphash"

// Operators' operations (dianad's admin API): they change what an identity is held to outside
// the algorithms, so they are not for the request path.

// Reset drops the state of key, its ban included: the identity starts afresh. It reports whether
// the store held a live state for key.
func (s *Store) Reset(key string) bool {
	now := s.now()
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, key)
	if e == nil {
		return false
	}
	sh.remove(h, e)
	return e.expires > now
}

// Unban lifts the ban of key and keeps the rest of its state: the algorithm carries on as it
// was. It reports whether a ban held.
func (s *Store) Unban(key string) bool {
	now := s.now()
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, key)
	if e == nil || e.expires <= now || e.st.Ban <= now {
		return false
	}
	e.st.Ban = 0
	return true
}

// Banned is an identity under a ban, and the µs the ban still holds.
type Banned struct {
	Key  string
	Left int64
}

// Bans returns up to max identities whose key match accepts and that a ban holds now, and
// whether there were more. It locks one shard at a time, so its cost follows the store's size
// (at most Options.MaxEntries), not the number of bans.
func (s *Store) Bans(match func(key string) bool, max int) (bans []Banned, more bool) {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
	scan:
		for _, head := range sh.m {
			for e := head; e != nil; e = e.next {
				if e.expires <= now || e.st.Ban <= now || !match(e.key) {
					continue
				}
				if len(bans) == max {
					more = true
					break scan
				}
				bans = append(bans, Banned{Key: e.key, Left: e.st.Ban - now})
			}
		}
		sh.mu.Unlock()
		if more {
			break
		}
	}
	return bans, more
}
