// The warnings of a valid config taken otherwise than written: a field that does not apply,
// ignored; a value lowered to what the algorithm holds.

package main

import (
	"fmt"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// warn records, that the config was taken otherwise than written.
func (s *settings) warn(field, reason string) {
	s.Warnings = append(s.Warnings, field+": "+reason)
}

// ignoreInapplicable sets each field of fs that does not apply to the values v (see applies)
// back to its default, with a warning if it was set otherwise.
func (s *settings) ignoreInapplicable(fs []field, v values) {
	byName := map[string]field{}
	for _, f := range fs {
		byName[f.Name] = f
	}
	for _, f := range fs {
		if !applies(byName, f, v) && !isDefault(f, v[f.Name]) {
			s.warn(f.Name, "is ignored: it applies only when "+f.Applies.String())
			v[f.Name] = f.Default
		}
	}
}

// lower lowers each parameter of sp's limit that is above the largest the algorithm takes at
// the others' values (its Largest) to that largest, with a warning.
func (s *settings) lower(sp *rules.Spec, lf limitFields) {
	kind, ok := rules.Algorithm(sp.Limit.Algorithm)
	if !ok {
		return
	}
	for _, p := range kind.Params {
		if p.Largest == nil {
			continue
		}
		resolved := kind.Resolve(sp.Limit.Params)
		most := p.Largest(resolved)
		if resolved[p.Name] <= most || most < p.Min {
			continue
		}
		_, err := kind.Build(resolved, 1)
		pe, ok := err.(*algos.ParamError)
		if !ok || pe.Param != p.Name {
			continue // another parameter is wrong: its error says so
		}
		sp.Limit.Params[p.Name] = most
		shown := strconv.FormatInt(most, 10)
		if p.Type == rules.Duration {
			shown = conf.FormatDuration(most)
		}
		s.warn(lf.field(sp, "limit."+p.Name), fmt.Sprintf("is lowered to %s for the rule %s: %s", shown, sp.Name, pe.Reason))
	}
}
