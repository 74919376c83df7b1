package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/oauthflow"
)

// Client talks to a host through its control API: a running host's
// socket ([Dial]) or an in-process one ([Pipe]). It is a [Host] itself.
type Client struct {
	hc *http.Client
}

var _ Host = (*Client)(nil)

// Dial returns a client for the host whose data folder is dataDir, or an
// error when no host answers there.
func Dial(ctx context.Context, dataDir string) (*Client, error) {
	path := filepath.Join(dataDir, SocketName)
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{hc: &http.Client{Transport: tr}}, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://agenthost" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("talking to the running host: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp.StatusCode, resp.Body)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Tools lists the user's tools.
func (c *Client) Tools(ctx context.Context, user string) ([]api.Tool, error) {
	var out []api.Tool
	return out, c.do(ctx, "GET", "/v1/tools", url.Values{"user": {user}}, nil, &out)
}

// Call runs a tool.
func (c *Client) Call(ctx context.Context, user, conversation, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	var res callResult
	if err := c.do(ctx, "POST", "/v1/call", nil, callRequest{User: user, Conversation: conversation, Name: name, Arguments: args}, &res); err != nil {
		return nil, err
	}
	return &ext.CallToolResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}, nil
}

// Sections lists the settings sections.
func (c *Client) Sections(ctx context.Context) ([]api.Section, error) {
	var out []api.Section
	return out, c.do(ctx, "GET", "/v1/sections", nil, nil, &out)
}

// GetSettings returns a user's values of one section.
func (c *Client) GetSettings(ctx context.Context, user, extName, section string) (*api.SettingsValues, error) {
	var out api.SettingsValues
	err := c.do(ctx, "GET", "/v1/settings", url.Values{"user": {user}, "ext": {extName}, "section": {section}}, nil, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SetSettings stores a user's values of one section.
func (c *Client) SetSettings(ctx context.Context, user, extName, section string, values json.RawMessage) error {
	return c.do(ctx, "PUT", "/v1/settings", nil, settingsRequest{User: user, Extension: extName, Section: section, Values: values}, nil)
}

// PatchSettings merges a JSON Merge Patch into a user's values of one
// section.
func (c *Client) PatchSettings(ctx context.Context, user, extName, section string, patch json.RawMessage) error {
	return c.do(ctx, "PATCH", "/v1/settings", nil, settingsRequest{User: user, Extension: extName, Section: section, Values: patch}, nil)
}

// SetSecret stores a secret.
func (c *Client) SetSecret(ctx context.Context, user, extName, name, value string) error {
	return c.do(ctx, "PUT", "/v1/secret", nil, secretRequest{User: user, Extension: extName, Name: name, Value: value}, nil)
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, user, extName, name string) error {
	return c.do(ctx, "DELETE", "/v1/secret", url.Values{"user": {user}, "ext": {extName}, "name": {name}}, nil, nil)
}

// Status reports the per-user status.
func (c *Client) Status(ctx context.Context, user string) ([]api.StatusEntry, error) {
	var out []api.StatusEntry
	return out, c.do(ctx, "GET", "/v1/status", url.Values{"user": {user}}, nil, &out)
}

// RunAction asks extension extName for action on its status entry
// (user, name), as the operator, and returns its answer.
func (c *Client) RunAction(ctx context.Context, extName, user, name, action string) (string, error) {
	var out actionResult
	err := c.do(ctx, "POST", "/v1/actions", nil, actionRequest{Extension: extName, User: user, Name: name, Action: action}, &out)
	return out.Message, err
}

// Overview returns the operator's summary.
func (c *Client) Overview(ctx context.Context) (api.Overview, error) {
	var out api.Overview
	return out, c.do(ctx, "GET", "/v1/overview", nil, nil, &out)
}

// Extensions describes the extensions.
func (c *Client) Extensions(ctx context.Context) ([]api.ExtensionInfo, error) {
	var out []api.ExtensionInfo
	return out, c.do(ctx, "GET", "/v1/extensions", nil, nil, &out)
}

// CreateToken issues a token; the plaintext is returned once.
func (c *Client) CreateToken(ctx context.Context, user, name string, operator bool) (string, TokenInfo, error) {
	var out tokenCreated
	err := c.do(ctx, "POST", "/v1/tokens", nil, tokenRequest{User: user, Name: name, Operator: operator}, &out)
	return out.Token, out.Info, err
}

// CreateScopedToken issues a user's token narrowed to scope (nil: all
// the user has) and/or expiring (zero: never); the plaintext is returned
// once.
func (c *Client) CreateScopedToken(ctx context.Context, user, name string, scope *ext.Scope, expires time.Time) (string, TokenInfo, error) {
	var out tokenCreated
	err := c.do(ctx, "POST", "/v1/tokens", nil, tokenRequest{User: user, Name: name, Scope: scope, Expires: expires}, &out)
	return out.Token, out.Info, err
}

// ListTokens lists tokens (never their values).
func (c *Client) ListTokens(ctx context.Context, user string) ([]TokenInfo, error) {
	var out []TokenInfo
	return out, c.do(ctx, "GET", "/v1/tokens", url.Values{"user": {user}}, nil, &out)
}

// RevokeToken revokes a token at once.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/tokens", url.Values{"id": {id}}, nil, nil)
}

// CreateLoginLink returns a one-time sign-in URL for user.
func (c *Client) CreateLoginLink(ctx context.Context, user string) (string, error) {
	var out loginLink
	return out.URL, c.do(ctx, "POST", "/v1/login-links", nil, tokenRequest{User: user}, &out)
}

// BeginAuth starts an OAuth sign-in of user to resource name of extension
// extName in the host and returns the URL to open.
func (c *Client) BeginAuth(ctx context.Context, user, extName, name string) (*oauthflow.Started, error) {
	var out oauthflow.Started
	if err := c.do(ctx, "POST", "/v1/auth", nil, authRequest{User: user, Extension: extName, Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitAuth waits until the sign-in of state ends, or ctx ends.
func (c *Client) WaitAuth(ctx context.Context, state string) (*oauthflow.Result, error) {
	var out oauthflow.Result
	if err := c.do(ctx, "GET", "/v1/auth", url.Values{"state": {state}}, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
