package control

import (
	"context"

	"github.com/agenthost/agenthost/host/internal/audit"
)

// Audit returns the audit records f selects, oldest first.
func (c *Client) Audit(ctx context.Context, f audit.Filter) ([]audit.Record, error) {
	var out []audit.Record
	return out, c.do(ctx, "GET", "/v1/audit", audit.Query(f), nil, &out)
}
