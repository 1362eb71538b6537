package rls

import (
	"slices"
	"strings"
)

// BucketLimit is the limit a rate limit quota bucket (package rlqs) maps onto.
type BucketLimit struct {
	Limit *Limit // nil: no descriptor has a limit for the bucket
	// Entries are the bucket's keys in the order the descriptor tree took them, and Values the
	// values they count under (a share_threshold entry's wildcard value instead of its own).
	Entries, Values []string
}

// Bucket finds the limit of a rate limit quota bucket (Envoy's BucketId: a map, whose keys
// have no order) in domain: the bucket is read as the descriptor whose entries the tree takes,
// level by level, as lookup matches a descriptor's (key_value, then a wildcard value, then the
// key alone); at each level the first of the bucket's remaining keys, in sorted order, that a
// descriptor there matches is taken. The limit applies only when every key was taken and the
// last level has one, as a descriptor's limit applies only at its last entry. known is false
// for a domain that no file declares.
func (c *Config) Bucket(domain string, bucket map[string]string) (b BucketLimit, known bool) {
	n := c.domains[domain]
	if n == nil {
		return b, false
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for len(keys) > 0 {
		var next *node
		var value string
		taken := -1
		for i, k := range keys {
			if next, value = n.child(k, bucket[k]); next != nil {
				taken = i
				break
			}
		}
		if next == nil {
			return BucketLimit{}, true
		}
		b.Entries = append(b.Entries, keys[taken])
		b.Values = append(b.Values, value)
		keys = slices.Delete(keys, taken, taken+1)
		if len(keys) == 0 {
			b.Limit = next.limit
			break
		}
		n = next
	}
	if b.Limit == nil {
		return BucketLimit{}, true
	}
	return b, true
}

// child is the descriptor of n that the entry key=value matches, and the value the entry
// counts under: its own, or the wildcard value of a share_threshold descriptor.
func (n *node) child(key, value string) (*node, string) {
	name := key + "_" + value
	if c := n.children[name]; c != nil {
		return c, value
	}
	for _, w := range n.wildcards {
		if strings.HasPrefix(name, strings.TrimSuffix(w, "*")) {
			c := n.children[w]
			if c.share != "" {
				return c, c.share
			}
			return c, value
		}
	}
	return n.children[key], value
}

// UnitSeconds is the length of the limit's unit in seconds.
func (l *Limit) UnitSeconds() int64 { return unitSeconds(l.Unit) }
