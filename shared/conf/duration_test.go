package conf_test

import (
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
)

const (
	us     = int64(1)
	ms     = 1000 * us
	sec    = 1000 * ms
	minute = 60 * sec
	hr     = 60 * minute
	day    = 24 * hr
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0s", 0},
		{"1s", sec},
		{"250ms", 250 * ms},
		{"1m30s", 90 * sec},
		{"1h30m", 90 * minute},
		{"1d", day},
		{"7d", 7 * day},
		{"1w", 7 * day},
		{"1y", 365 * day},
		{"10y", 3650 * day},
		{"1d12h", 36 * hr},
		{"100us", 100},
		{"100µs", 100},
		{"1s500ms", 1500 * ms},
		{"2m2m", 4 * minute}, // repeated units add up, as in Go's time.ParseDuration
		{"000015s", 15 * sec},
		{"999999999999999us", 999999999999999},
		{"53375995d", 53375995 * day}, // just below the 2^62 µs cap
	}
	for _, tt := range tests {
		got, reason := conf.ParseDuration(tt.in)
		if reason != "" || got != tt.want {
			t.Errorf("ParseDuration(%q) = %d, %q; want %d", tt.in, got, reason, tt.want)
		}
	}
}

func TestParseDurationInvalid(t *testing.T) {
	tests := []struct {
		in, reason string
	}{
		{"", "must be a duration such as"},
		{"10", "must be a duration such as"}, // no unit: seconds or milliseconds?
		{"1x", "must be a duration such as"},
		{"5 s", "must be a duration such as"},
		{" 5s", "must be a duration such as"},
		{"5s ", "must be a duration such as"},
		{"s", "must be a duration such as"},
		{"µs", "must be a duration such as"},
		{"-1s", "must be a duration such as"},
		{"+1s", "must be a duration such as"},
		{"1.5s", "must be a duration such as"},
		{"1S", "must be a duration such as"},
		{"1sec", "must be a duration such as"},
		{"1mss", "must be a duration such as"},
		{"1m30", "must be a duration such as"},
		{"1ns", "must be a duration such as"},
		{"1M", "must be a duration such as"}, // a month has no fixed length
		{"99999999999999999d", "is too long"},
		{"9999999999999999999999999s", "is too long"},
		{"999999999999999d", "is too long"},
		{"53375996d", "is too long"}, // just above 2^62 µs
		{"53375995d1d", "is too long"},
	}
	for _, tt := range tests {
		got, reason := conf.ParseDuration(tt.in)
		if !strings.Contains(reason, tt.reason) {
			t.Errorf("ParseDuration(%q) = %d, %q; want a reason containing %q", tt.in, got, reason, tt.reason)
		}
		if got != 0 {
			t.Errorf("ParseDuration(%q) = %d with an error; want 0", tt.in, got)
		}
		if !strings.Contains(reason, tt.in) {
			t.Errorf("ParseDuration(%q): reason %q does not quote the input", tt.in, reason)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0s"},
		{1, "1us"},
		{999, "999us"},
		{ms, "1ms"},
		{1500 * ms, "1500ms"},
		{sec, "1s"},
		{90 * sec, "90s"},
		{minute, "1m"},
		{90 * minute, "90m"},
		{hr, "1h"},
		{36 * hr, "36h"},
		{day, "1d"},
		{6 * day, "6d"},
		{7 * day, "1w"},
		{365 * day, "1y"},
		{366 * day, "366d"},
		{day + 1, "86400000001us"},
		{-5 * sec, "-5s"},
	}
	for _, tt := range tests {
		if got := conf.FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FormatDuration's output parses back to the same value, so messages quote durations in the
// syntax configs use.
func TestFormatDurationRoundTrip(t *testing.T) {
	values := []int64{0, 1, 7, ms, 1500 * ms, sec, 61 * sec, 90 * minute, 36 * hr, day, 3*day + 1, 1 << 53, 1<<62 - 1, 1 << 62}
	for v := int64(1); v < 1<<62/1000; v = v*1000 + 7 {
		values = append(values, v, v*1000)
	}
	for _, v := range values {
		s := conf.FormatDuration(v)
		got, reason := conf.ParseDuration(s)
		if reason != "" || got != v {
			t.Errorf("ParseDuration(FormatDuration(%d) = %q) = %d, %q", v, s, got, reason)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1m30s", "250ms", "1d", "100µs", "99999999999999999d", "5 s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, reason := conf.ParseDuration(s)
		if reason != "" {
			return
		}
		if v < 0 || v > 1<<62 {
			t.Fatalf("ParseDuration(%q) = %d, outside [0, 2^62]", s, v)
		}
		if back, r := conf.ParseDuration(conf.FormatDuration(v)); r != "" || back != v {
			t.Fatalf("round trip of %q: %d → %q → %d, %q", s, v, conf.FormatDuration(v), back, r)
		}
	})
}
