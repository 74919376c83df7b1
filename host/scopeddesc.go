package host

import (
	"github.com/agenthost/agenthost/ext"
)

// toolInScope reports whether scope reaches t: by its name, or, for a tool
// with a scoped description ([ext.MetaScopedDescription], code mode's
// code/run), by the tools its parts name (at least one in scope).
func toolInScope(scope *ext.Scope, t ext.Tool) bool {
	if scope == nil {
		return true
	}
	if _, d := ext.SplitScopedDescription(t); d != nil {
		return d.Reaches(scope)
	}
	return scope.AllowsTool(t.Name)
}

// honourScoped returns tools as extName may publish them: a scoped
// description is honoured only from an extension the host tells users'
// tools ([ext.CapabilityUserTools]); from any other (ext-mcp, whose tools'
// _meta a remote server writes) it is removed, so that no server can put
// its tool into another server's scope.
func (s *hostServices) honourScoped(tools []ext.Tool) []ext.Tool {
	if s.userTools {
		return tools
	}
	var out []ext.Tool
	for i, t := range tools {
		if t2, d := ext.SplitScopedDescription(t); d != nil {
			if out == nil {
				out = append(make([]ext.Tool, 0, len(tools)), tools[:i]...)
			}
			out = append(out, t2)
		} else if out != nil {
			out = append(out, t)
		}
	}
	if out == nil {
		return tools
	}
	return out
}

// scopedTool returns t as scope sees it (a scoped description rendered
// for scope, its parts' key removed), and whether scope reaches it.
func scopedTool(scope *ext.Scope, t ext.Tool) (ext.Tool, bool) {
	t2, d := ext.SplitScopedDescription(t)
	if d == nil {
		return t, scope.AllowsTool(t.Name)
	}
	if scope == nil {
		return t2, true
	}
	desc, ok := d.Render(scope)
	t2.Description = desc
	return t2, ok
}
