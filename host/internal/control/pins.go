package control

import (
	"context"
	"net/url"
	"strconv"

	"github.com/agenthost/agenthost/host/internal/pins"
)

// Pinner is implemented by a [Host] that pins tool definitions
// (*host.Host): the control API then serves its pins (GET /v1/pins) and
// their approval (POST /v1/pins/approve).
type Pinner interface {
	Pins(ctx context.Context, user, server string, all bool) ([]pins.View, error)
	ApprovePins(ctx context.Context, a pins.Approval, cred string) ([]pins.View, error)
}

// PinApproveRequest is the body of POST /v1/pins/approve: the operator
// approves server's pending changes (one tool's with Tool; one user's
// with User, which a user's own server needs).
type PinApproveRequest struct {
	Server string `json:"server"`
	Tool   string `json:"tool,omitempty"`
	User   string `json:"user,omitempty"`
}

// Pins returns the pins of user ("": every user) on server ("": every
// server), only the pending ones unless all.
func (c *Client) Pins(ctx context.Context, user, server string, all bool) ([]pins.View, error) {
	q := url.Values{}
	if user != "" {
		q.Set("user", user)
	}
	if server != "" {
		q.Set("server", server)
	}
	if all {
		q.Set("all", strconv.FormatBool(all))
	}
	var out []pins.View
	return out, c.do(ctx, "GET", "/v1/pins", q, nil, &out)
}

// ApprovePins approves pending changes as the operator.
func (c *Client) ApprovePins(ctx context.Context, req PinApproveRequest) ([]pins.View, error) {
	var out []pins.View
	return out, c.do(ctx, "POST", "/v1/pins/approve", nil, req, &out)
}
