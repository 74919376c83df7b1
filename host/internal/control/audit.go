package control

import (
	"context"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// Audit returns the audit records f selects, oldest first.
func (c *Client) Audit(ctx context.Context, f audit.Filter) ([]audit.Record, error) {
	var out []audit.Record
	return out, c.do(ctx, "GET", "/v1/audit", audit.Query(f), nil, &out)
}

// Reload asks the running host to re-read the operator's file.
func (c *Client) Reload(ctx context.Context) (*api.ReloadResult, error) {
	var out api.ReloadResult
	if err := c.do(ctx, "POST", "/v1/reload", nil, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fleet returns every user's resources that are not well, also of users
// not active now.
func (c *Client) Fleet(ctx context.Context) ([]api.FleetEntry, error) {
	var out []api.FleetEntry
	return out, c.do(ctx, "GET", "/v1/fleet", nil, nil, &out)
}
