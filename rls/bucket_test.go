package rls

import (
	"slices"
	"testing"
)

// A rate limit quota bucket (a map) is read as the descriptor whose entries the tree takes.
func TestBucket(t *testing.T) {
	cfg, err := Parse([]File{{Name: "q.yaml", Data: []byte(`
domain: q
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: tenant
        value: acme
        rate_limit: {unit: second, requests_per_unit: 500}
  - key: zone
    descriptors:
      - key: name
        value: api
        rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 9}
  - key: path
    value: /img/*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: name
    value: top
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2}
`)}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bucket          map[string]string
		limit           uint32 // 0: none
		entries, values []string
	}{
		{map[string]string{"name": "api", "tenant": "globex"}, 100, []string{"name", "tenant"}, []string{"api", "globex"}},
		{map[string]string{"tenant": "acme", "name": "api"}, 500, []string{"name", "tenant"}, []string{"api", "acme"}},
		// name sorts first, but name=api leaves zone with nowhere to go: zone, then name.
		{map[string]string{"name": "api", "zone": "eu"}, 7, []string{"zone", "name"}, []string{"eu", "api"}},
		{map[string]string{"zone": "eu", "name": "top"}, 0, nil, nil},
		{map[string]string{"path": "/files/a"}, 9, []string{"path"}, []string{"/files/*"}},
		{map[string]string{"path": "/img/a"}, 3, []string{"path"}, []string{"/img/a"}},
		{map[string]string{"name": "top"}, 1, []string{"name"}, []string{"top"}},
		{map[string]string{"name": "top", "user": "u"}, 2, []string{"name", "user"}, []string{"top", "u"}},
		{map[string]string{"name": "api"}, 0, nil, nil}, // the limit is one level further
		{map[string]string{"name": "api", "tenant": "x", "more": "y"}, 0, nil, nil},
		{map[string]string{"other": "x"}, 0, nil, nil},
	} {
		b, known := cfg.Bucket("q", tc.bucket)
		got := uint32(0)
		if b.Limit != nil {
			got = b.Limit.RequestsPerUnit
		}
		if !known || got != tc.limit || !slices.Equal(b.Entries, tc.entries) || !slices.Equal(b.Values, tc.values) {
			t.Errorf("%v: limit %d %v %v (known %v), want %d %v %v", tc.bucket, got, b.Entries, b.Values, known, tc.limit, tc.entries, tc.values)
		}
	}
	if _, known := cfg.Bucket("nope", map[string]string{"name": "api"}); known {
		t.Error("an unknown domain is known")
	}
	if b, known := cfg.Bucket("q", nil); !known || b.Limit != nil {
		t.Errorf("no entries: %+v %v", b, known)
	}
}
