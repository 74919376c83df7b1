package extrunner

import (
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// TestConformance: ext-runner passes the extension conformance suite on
// every carrier (its descriptor lists exactly what it implements,
// actions among them).
func TestConformance(t *testing.T) {
	exttest.Run(t, func() ext.Extension { return New(nil) }, &exttest.RunOptions{
		Config: json.RawMessage(`{"profiles":{"p":{"command":"/bin/true"}},"allowUserRunners":true}`),
	})
}
