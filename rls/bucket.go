package rls

import (
	"slices"
)

// BucketLimit is the limit a rate limit quota bucket (package rlqs) maps onto.
type BucketLimit struct {
	Limit *Limit // nil: no descriptor has a limit for the bucket
	// Entries are the bucket's keys in the order the descriptor tree took them, and Values the
	// values they count under (a share_threshold entry's wildcard value instead of its own).
	Entries, Values []string
}

// Bucket finds the limit of a rate limit quota bucket (Envoy's BucketId: a map, whose keys
// have no order) in domain: the bucket is read as a descriptor whose entries take the tree level
// by level, each entry matching a descriptor as lookup matches one (key_value, then a wildcard
// value, then the key alone). The keys are tried in sorted order at each level, going back
// where a way ends short, and the first way that takes every key to a level with a limit
// gives it, as a descriptor's limit applies only at its last entry. A descriptor is reached by
// one way only (each level's descriptor names the key it takes), so the search visits each at
// most once: it is bounded by the config's size. known is false for a domain that no file
// declares.
func (c *Config) Bucket(domain string, bucket map[string]string) (b BucketLimit, known bool) {
	n := c.domains[domain]
	if n == nil {
		return b, false
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return b, true
	}
	slices.Sort(keys)
	if !n.bucket(bucket, keys, &b) {
		return BucketLimit{}, true
	}
	return b, true
}

// bucket looks for a way through n's descriptors that takes every key of keys to a limit,
// appending it to b.
func (n *node) bucket(bucket map[string]string, keys []string, b *BucketLimit) bool {
	for i, k := range keys {
		next, value := n.child(k, bucket[k])
		if next == nil {
			continue
		}
		b.Entries, b.Values = append(b.Entries, k), append(b.Values, value)
		if len(keys) == 1 {
			if next.limit != nil {
				b.Limit = next.limit
				return true
			}
		} else if next.bucket(bucket, slices.Delete(slices.Clone(keys), i, i+1), b) {
			return true
		}
		b.Entries, b.Values = b.Entries[:len(b.Entries)-1], b.Values[:len(b.Values)-1]
	}
	return false
}

// child is the descriptor of n that the entry key=value matches, and the value the entry
// counts under: its own, or the wildcard value of a share_threshold descriptor.
func (n *node) child(key, value string) (*node, string) {
	c, wild := n.byName([]byte(key + "_" + value))
	switch {
	case c == nil:
		return n.children[key], value
	case wild != "" && c.share != "":
		return c, c.share
	}
	return c, value
}

// UnitSeconds is the length of the limit's unit in seconds.
func (l *Limit) UnitSeconds() int64 { return unitSeconds(l.Unit) }
