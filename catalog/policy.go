package catalog

import (
	"fmt"
	"strings"

	"github.com/agenthost/agenthost/ext"
)

// ToolPolicy maps a tool name, or a glob over tool names, to how the tool
// is exposed: [ext.ExposureDirect], [ext.ExposureDeferred],
// [ext.ExposureCodemode] or [Hidden]. A glob's "*" matches any run of
// characters (including "/") and "?" matches one character; there are no
// other metacharacters.
//
// A tool takes the exposure of its exact name when listed, else that of
// the longest matching glob (ties go to the alphabetically first), else
// [ext.ExposureDirect]. A nil policy exposes every tool directly.
type ToolPolicy map[string]ext.Exposure

// Resolve returns how tool is exposed and whether it is hidden.
func (p ToolPolicy) Resolve(tool string) (exposure ext.Exposure, hidden bool) {
	if len(p) == 0 {
		return ext.ExposureDirect, false
	}
	exp, ok := p[tool]
	if !ok {
		best := ""
		for pat, e := range p {
			if !isGlob(pat) || !globMatch(pat, tool) {
				continue
			}
			if !ok || len(pat) > len(best) || (len(pat) == len(best) && pat < best) {
				best, exp, ok = pat, e, true
			}
		}
	}
	switch {
	case !ok || exp == "":
		return ext.ExposureDirect, false
	case exp == Hidden:
		return "", true
	}
	return exp, false
}

// Validate reports the first entry of p that is not a known exposure or
// has an empty pattern.
func (p ToolPolicy) Validate() error {
	for pat, e := range p {
		if pat == "" {
			return fmt.Errorf("empty tool name or glob")
		}
		switch e {
		case ext.ExposureDirect, ext.ExposureDeferred, ext.ExposureCodemode, Hidden:
		default:
			return fmt.Errorf("tool %q: exposure %q is not one of direct, deferred, codemode, hidden", pat, e)
		}
	}
	return nil
}

func isGlob(pat string) bool { return strings.ContainsAny(pat, "*?") }

// globMatch reports whether name matches pat, where "*" matches any run of
// bytes and "?" one rune. It runs in O(len(pat)·len(name)) time, with no
// backtracking blow-up.
func globMatch(pat, name string) bool {
	// The classic two-pointer algorithm with one backtrack point.
	p, n := []rune(pat), []rune(name)
	pi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(n) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == n[ni]):
			pi++
			ni++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
