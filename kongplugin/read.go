// Reading Kong's typed config: each flat field as Kong's schema validates it, then its entity
// checks.

package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/diana-gw/diana/shared/conf"
)

// readValues reads every field of fs from o (doc's reader) into values, each its default when
// absent; strict refuses the keys that are no field.
func readValues(o *conf.Obj, doc conf.Value, fs []field, strict bool) values {
	v := values{} // nil: an optional field unset
	for _, f := range fs {
		v[f.Name] = readField(o, doc, f)
	}
	if strict {
		o.Done()
	}
	return v
}

// checkValues runs the entity checks of fs on the values v, as Kong does.
func checkValues(o *conf.Obj, fs []field, v values) {
	for _, c := range checks(fs) {
		if reason := c.fails(v); reason != "" {
			o.Fail(c.Then, reason)
		}
	}
}

// readField reads one field as Kong validates it: its type, between, one_of, len_min (1 for a
// string unless Empty), match_any and match_none; an absent or null field is its default. It
// returns int64, string, bool or []string, or nil for an unset optional field.
func readField(o *conf.Obj, doc conf.Value, f field) any {
	var raw conf.Value
	if d, ok := doc.(*conf.Object); ok {
		raw, _ = d.Get(f.Name)
	}
	if raw == nil {
		o.String(f.Name, "") // marks a null as read, for strict decoding
		if f.Type == "array" {
			return []string(nil) // every array defaults to empty
		}
		return f.Default
	}
	switch f.Type {
	case "integer":
		min, max := int64(math.MinInt64), int64(math.MaxInt64)
		if f.Min != nil {
			min, max = *f.Min, *f.Max
		}
		return o.Int(f.Name, 0, min, max)
	case "boolean":
		return o.Bool(f.Name, false)
	case "array":
		if e, ok := raw.(*conf.Object); ok && len(e.Keys) == 0 {
			// Lua's cjson encodes an empty table as {} unless it carries the array metatable:
			// Kong may send an empty list so.
			o.Raw(f.Name) // marks it read, for strict decoding
			return []string(nil)
		}
		l := o.Strings(f.Name)
		for i, e := range l {
			if reason := checkString(f, e); reason != "" {
				o.Fail(f.Name+"["+strconv.Itoa(i)+"]", reason)
			}
		}
		return l
	}
	v := o.String(f.Name, "")
	if reason := checkString(f, v); reason != "" {
		o.Fail(f.Name, reason)
	}
	return v
}

// checkString returns why s is not a value of f, or "".
func checkString(f field, s string) string {
	switch {
	case s == "" && !f.Empty:
		return "cannot be empty (length must be at least 1)"
	case s == "":
		return ""
	case f.OneOf != nil && !slices.Contains(f.OneOf, s):
		return "must be one of " + strings.Join(f.OneOf, ", ") + ", got " + strconv.Quote(s)
	}
	for _, n := range f.None {
		if luaMatch(n.Pattern, s) {
			return n.Err + ", got " + strconv.Quote(s)
		}
	}
	if f.Match != nil && !slices.ContainsFunc(f.Match.Patterns, func(p string) bool { return luaMatch(p, s) }) {
		return f.Match.Err + ", got " + strconv.Quote(s)
	}
	return ""
}

var luaPatterns sync.Map // Lua pattern → *regexp.Regexp

// luaMatch reports whether s matches the Lua pattern p (a pattern that does not translate
// matches nothing: TestPatterns checks that every pattern of the schema does).
func luaMatch(p, s string) bool {
	re, ok := luaPatterns.Load(p)
	if !ok {
		r, err := luaRegexp(p)
		if err != nil {
			return false
		}
		re, _ = luaPatterns.LoadOrStore(p, r)
	}
	return re.(*regexp.Regexp).MatchString(s)
}

// applies reports whether f applies given the values v: its condition holds, and the field
// of the condition applies itself.
func applies(byName map[string]field, f field, v values) bool {
	for c := f.Applies; c != nil; c = byName[c.Field].Applies {
		if !c.holds(v[c.Field]) {
			return false
		}
	}
	return true
}

func (c *cond) holds(x any) bool {
	return slices.ContainsFunc(c.OneOf, func(w any) bool { return equal(w, x) })
}

// equal compares a value of the schema (int, int64, string, bool) with a decoded one.
func equal(w, x any) bool {
	if i, ok := w.(int); ok {
		w = int64(i)
	}
	return w == x
}

func (c *cond) String() string {
	var vs []string
	for _, x := range c.OneOf {
		vs = append(vs, fmt.Sprint(x))
	}
	return c.Field + " is " + strings.Join(vs, " or ")
}

// fails returns why the values v fail the check, or "".
func (c check) fails(v values) string {
	if !c.If.holds(v[c.If.Field]) {
		return ""
	}
	x := v[c.Then]
	switch {
	case x == nil && c.Required:
		return "is required when " + c.If.String()
	case x == nil:
		return ""
	case c.Eq != nil && !equal(c.Eq, x):
		return fmt.Sprintf("must be %v when %s, got %v", c.Eq, c.If.String(), x)
	case c.Between != nil:
		if n, _ := x.(int64); n < c.Between[0] || n > c.Between[1] {
			return fmt.Sprintf("must be between %d and %d when %s, got %d", c.Between[0], c.Between[1], c.If.String(), n)
		}
	}
	return ""
}

// isDefault reports whether x, a value of f, is unset or its default.
func isDefault(f field, x any) bool {
	if l, ok := x.([]string); ok {
		return len(l) == 0
	}
	return x == nil || equal(f.Default, x)
}
