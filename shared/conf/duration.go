package conf

import "strconv"

// Microseconds in each duration unit, largest first (FormatDuration picks the largest that
// divides).
var units = [...]struct {
	name string
	us   int64
}{{"y", 365 * 86400e6}, {"w", 7 * 86400e6}, {"d", 86400e6}, {"h", 3600e6}, {"m", 60e6}, {"s", 1e6}, {"ms", 1e3}, {"us", 1}, {"µs", 1}}

// ParseDuration parses a sequence of numbers with units, such as "1m30s", into µs. It returns a
// reason instead of an error, to be recorded with the field's path.
func ParseDuration(s string) (us int64, reason string) {
	orig := s
	bad := "must be a duration such as \"500ms\", \"1s\", \"1m30s\" or \"1d\" (units y (365d), w, d, h, m, s, ms, us), got " + strconv.Quote(s)
	if s == "" {
		return 0, bad
	}
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, bad
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil { // out of int64's range; smaller values are checked below, once the unit is known
			return 0, "is too long: " + strconv.Quote(orig)
		}
		s = s[i:]
		unit := int64(0)
		for _, u := range units {
			if len(s) >= len(u.name) && s[:len(u.name)] == u.name &&
				(len(s) == len(u.name) || s[len(u.name)] < 'a' || s[len(u.name)] > 'z') {
				unit, s = u.us, s[len(u.name):]
				break
			}
		}
		if unit == 0 {
			return 0, bad
		}
		if n > (1<<62-us)/unit {
			return 0, "is too long: " + strconv.Quote(orig)
		}
		us += n * unit
	}
	return us, ""
}

// FormatDuration writes us with the largest unit that divides it: 90s is "90s", 1.5 s "1500ms".
func FormatDuration(us int64) string {
	if us == 0 {
		return "0s"
	}
	for _, u := range units {
		if us%u.us == 0 {
			return strconv.FormatInt(us/u.us, 10) + u.name
		}
	}
	return strconv.FormatInt(us, 10) + "us"
}
