package extmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// What a server offers beside tools: prompts, resources, resource
// templates, completions, tasks and its instructions. Lists come through
// go-sdk; prompts/get, resources/read, completion/complete,
// resources/(un)subscribe and tasks/* are ext-mcp's own requests whose
// results stay raw, where the connection has that path (stdio and
// session-bound HTTP), and go through go-sdk otherwise (tasks need the raw
// path).

// ListExtras implements [catalog.FeatureConn]: every page of what the
// server declared in its capabilities.
func (c *conn) ListExtras(ctx context.Context) (*catalog.Extras, error) {
	x := &catalog.Extras{}
	if c.init == nil {
		return x, nil
	}
	x.Instructions = c.init.Instructions
	caps := c.init.Capabilities
	if caps == nil {
		return x, nil
	}
	if caps.Prompts != nil {
		for p, err := range c.cs.Prompts(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("listing prompts: %w", c.redact(err))
			}
			b, err := json.Marshal(p)
			if err != nil {
				return nil, err
			}
			x.Prompts = append(x.Prompts, catalog.NamedInfo{Name: p.Name, Definition: b})
		}
	}
	if caps.Resources != nil {
		for r, err := range c.cs.Resources(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("listing resources: %w", c.redact(err))
			}
			b, err := json.Marshal(r)
			if err != nil {
				return nil, err
			}
			x.Resources = append(x.Resources, catalog.NamedInfo{Name: r.URI, Definition: b})
		}
		for t, err := range c.cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				if isMethodNotFound(err) {
					break // a server with resources but no templates
				}
				return nil, fmt.Errorf("listing resource templates: %w", c.redact(err))
			}
			b, err := json.Marshal(t)
			if err != nil {
				return nil, err
			}
			x.Templates = append(x.Templates, catalog.NamedInfo{Name: t.URITemplate, Definition: b})
		}
	}
	return x, nil
}

func isMethodNotFound(err error) bool {
	var werr *jsonrpc.Error
	return errors.As(err, &werr) && werr.Code == jsonrpc.CodeMethodNotFound
}

// request sends one request with a raw result: ext-mcp's own where the
// connection has that path, else through viaSDK (nil: unsupported here).
func (c *conn) request(ctx context.Context, method string, params json.RawMessage, sess ext.Session, viaSDK func() (any, error)) (json.RawMessage, error) {
	sess = ext.SessionOf(sess)
	defer c.track(sess, "")()
	res, ok, err := c.raw(ctx, method, func(string) ([]byte, error) { return params, nil }, sess)
	if !ok {
		if viaSDK == nil {
			return nil, fmt.Errorf("MCP server %q: %s needs a stdio or Streamable HTTP connection on a session revision: %w", c.server, method, ext.ErrUnimplemented)
		}
		var v any
		if v, err = viaSDK(); err == nil {
			res, err = json.Marshal(v)
		}
	}
	if err != nil {
		return nil, c.requestError(method, err)
	}
	return res, nil
}

// requestError words a failed request; "not found" answers wrap
// [ext.ErrNotFound] so the host can try elsewhere.
func (c *conn) requestError(method string, err error) error {
	var (
		werr *jsonrpc.Error
		big  *tooLargeError
	)
	if errors.As(err, &big) || c.overLimit(err, &big) {
		return fmt.Errorf("%s: %s", method, big.Error())
	}
	if errors.As(err, &werr) {
		msg := c.redactString(werr.Message)
		notFound := werr.Code == mcpwire.CodeResourceNotFound ||
			(werr.Code == jsonrpc.CodeInvalidParams && strings.Contains(strings.ToLower(msg), "not found"))
		if notFound {
			return fmt.Errorf("MCP server %q: %s: %s: %w", c.server, method, msg, ext.ErrNotFound)
		}
		if werr.Code == jsonrpc.CodeMethodNotFound {
			return fmt.Errorf("MCP server %q does not offer %s: %w", c.server, method, ext.ErrUnimplemented)
		}
		return fmt.Errorf("MCP server %q refused %s: %s (code %d)", c.server, method, msg, werr.Code)
	}
	return fmt.Errorf("MCP server %q: %s: %w", c.server, method, c.redact(err))
}

// GetPrompt implements [catalog.FeatureConn].
func (c *conn) GetPrompt(ctx context.Context, req *ext.GetPromptRequest) (json.RawMessage, error) {
	args := map[string]string{}
	if !isEmpty(req.Arguments) {
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return nil, fmt.Errorf("prompt arguments must be an object of strings: %w", ext.Mark(err, ext.ErrInvalidArgument))
		}
	}
	params, err := json.Marshal(map[string]any{"name": req.Name, "arguments": args})
	if err != nil {
		return nil, err
	}
	return c.request(ctx, "prompts/get", params, req.Session, func() (any, error) {
		return c.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: req.Name, Arguments: args})
	})
}

// ReadResource implements [catalog.FeatureConn].
func (c *conn) ReadResource(ctx context.Context, req *ext.ReadResourceRequest) (json.RawMessage, error) {
	params, err := json.Marshal(map[string]string{"uri": req.URI})
	if err != nil {
		return nil, err
	}
	return c.request(ctx, "resources/read", params, req.Session, func() (any, error) {
		return c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.URI})
	})
}

// SubscribeResource implements [catalog.FeatureConn].
func (c *conn) SubscribeResource(ctx context.Context, uri string, unsubscribe bool) error {
	method := "resources/subscribe"
	if unsubscribe {
		method = "resources/unsubscribe"
	}
	params, err := json.Marshal(map[string]string{"uri": uri})
	if err != nil {
		return err
	}
	_, err = c.request(ctx, method, params, nil, func() (any, error) {
		if unsubscribe {
			return struct{}{}, c.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
		}
		return struct{}{}, c.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	})
	return err
}

// Complete implements [catalog.FeatureConn].
func (c *conn) Complete(ctx context.Context, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	return c.request(ctx, "completion/complete", params, sess, func() (any, error) {
		var p mcp.CompleteParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		return c.cs.Complete(ctx, &p)
	})
}

// Task implements [catalog.FeatureConn]: tasks/* are ext-mcp's own
// requests (go-sdk knows nothing of tasks).
func (c *conn) Task(ctx context.Context, method string, params json.RawMessage, sess ext.Session) (json.RawMessage, error) {
	return c.request(ctx, method, params, sess, nil)
}

// The extension's capabilities beside tools route through the catalog.

// GetPrompt implements [ext.PromptProvider].
func (x *Extension) GetPrompt(ctx context.Context, req *ext.GetPromptRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	return e.GetPrompt(ctx, req)
}

// ReadResource implements [ext.ResourceProvider].
func (x *Extension) ReadResource(ctx context.Context, req *ext.ReadResourceRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	return e.ReadResource(ctx, req)
}

// SubscribeResource implements [ext.ResourceProvider].
func (x *Extension) SubscribeResource(ctx context.Context, req *ext.SubscribeRequest) error {
	if err := checkUser(req.User); err != nil {
		return err
	}
	_, _, e, err := x.state()
	if err != nil {
		return err
	}
	return e.SubscribeResource(ctx, req.User, req.URI, req.Unsubscribe)
}

// Complete implements [ext.Completer].
func (x *Extension) Complete(ctx context.Context, req *ext.CompleteRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	return e.Complete(ctx, req.User, req.Params, req.Session)
}

// HandleTask implements [ext.TaskHandler].
func (x *Extension) HandleTask(ctx context.Context, req *ext.TaskRequest) (json.RawMessage, error) {
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	_, _, e, err := x.state()
	if err != nil {
		return nil, err
	}
	return e.Task(ctx, req.User, req.Method, req.Params, req.Session)
}

// SessionNotify implements [ext.SessionListener]: a client's roots
// changed, so every server of that user hears
// notifications/roots/list_changed (and asks for the roots again).
func (x *Extension) SessionNotify(ctx context.Context, user, method string, _ json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if method != ext.MethodRootsChanged {
		return nil
	}
	_, _, e, err := x.state()
	if err != nil {
		return err
	}
	e.ForEach(user, func(_ string, cn catalog.Conn) {
		if c, ok := cn.(*conn); ok {
			if err := c.notify(ctx, ext.MethodRootsChanged, nil); err != nil {
				x.log.Warn("telling a server the roots changed failed", "user", user, "server", c.server, "error", err)
			}
		}
	})
	return nil
}
