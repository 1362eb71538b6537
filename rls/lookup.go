package rls

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match is a descriptor's limit and how it is named and counted.
type match struct {
	limit  *Limit
	metric string   // the stats key (the metrics' rule label)
	shared []string // by entry: the wildcard value a share_threshold entry counts under, or ""
}

// lookup finds the limit of a descriptor in domain as envoyproxy/ratelimit's GetLimit does: at
// each level the entry's key_value first, then a wildcard value ("val*", "a*b*c") matching it, then the
// key alone; the limit applies only at the level of the descriptor's last entry. known is false
// for a domain that no file declares.
func (c *Config) lookup(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (m match, known bool) {
	n := c.domains[domain]
	if n == nil {
		return m, false
	}
	size := len(domain) // of a metric key, so that it is built in one allocation
	for _, e := range entries {
		size += len(e.Key) + len(e.Value) + 2
	}
	var valued strings.Builder
	valued.Grow(size)
	valued.WriteString(domain)
	var buf [128]byte // key_value, looked up without a string of its own
	for i, e := range entries {
		kv := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next, wild := n.byName(kv)
		byValue := next != nil
		if next == nil {
			next = n.children[e.Key]
		}
		share := ""
		if wild != "" && next.share != "" {
			share = next.share
			if m.shared == nil {
				m.shared = make([]string, len(entries))
			}
			m.shared[i] = share
		}
		// The metric key with value_to_metric: the request's value where asked for.
		valued.WriteString(".")
		valued.WriteString(e.Key)
		if v := metricValue(e, next, wild, share, byValue); v != "" {
			valued.WriteString("_")
			valued.WriteString(v)
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			m.limit = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		n = next
	}
	if m.limit == nil {
		return match{}, true
	}
	if !m.limit.Detailed {
		m.metric = valued.String()
		return m, true
	}
	// A limit was found, so the loop went through every entry.
	m.metric = detailedMetric(domain, entries, m.shared, size)
	return m, true
}

// metricValue is what the entry e, matched by the node next (nil: none), adds to the metric
// key after its key, with value_to_metric: the request's value where asked for, else the
// wildcard's or the share_threshold's own value; "" for nothing.
func metricValue(e *rlv3.RateLimitDescriptor_Entry, next *node, wild, share string, byValue bool) string {
	switch {
	case next == nil:
		return ""
	case wild != "" && share != "":
		return share
	case wild != "" && next.valueToMetric:
		return e.Value
	case wild != "":
		return strings.TrimPrefix(wild, e.Key+"_")
	case byValue || next.valueToMetric:
		return e.Value
	}
	return ""
}

// detailedMetric is the metric key of detailed_metric: every entry's key and value (a
// share_threshold entry's by its wildcard value, from shared), in one allocation of size.
func detailedMetric(domain string, entries []*rlv3.RateLimitDescriptor_Entry, shared []string, size int) string {
	var b strings.Builder
	b.Grow(size)
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteString(".")
		b.WriteString(e.Key)
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		if v != "" || shared == nil {
			b.WriteString("_")
			b.WriteString(v)
		}
	}
	return b.String()
}
