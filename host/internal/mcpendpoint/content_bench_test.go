package mcpendpoint

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// BenchmarkResultEncoding compares the two ways to send a host result:
// raw (the endpoint's way: content blocks cut out of the host's bytes and
// written as they are) and decoded (content decoded into go-sdk's types,
// then encoded again, which is what building an mcp.CallToolResult from
// the host's JSON would cost). Both end in the JSON go-sdk writes.
func BenchmarkResultEncoding(b *testing.B) {
	small := ext.TextResult("hi")
	big := &ext.CallToolResult{}
	var blocks []ext.Content
	for range 20 {
		blocks = append(blocks, ext.Content{Type: "text", Text: strings.Repeat("lorem ipsum dolor sit amet ", 40)})
	}
	big.Content, _ = json.Marshal(blocks)
	big.StructuredContent = json.RawMessage(`{"rows":[` + strings.Repeat(`{"id":1,"name":"x"},`, 200) + `{"id":2}]}`)
	for name, res := range map[string]*ext.CallToolResult{"small": small, "20KiB": big} {
		b.Run(name+"/raw", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f, ok := statelessFields(res)
				if !ok {
					b.Fatal("statelessFields refused the result")
				}
				if _, err := json.Marshal(toMCP(f)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/decoded", func(b *testing.B) {
			b.ReportAllocs()
			wire := []byte(`{"content":` + string(res.Content) + `}`)
			for b.Loop() {
				var out mcp.CallToolResult
				if err := json.Unmarshal(wire, &out); err != nil {
					b.Fatal(err)
				}
				if len(res.StructuredContent) > 0 {
					var sc any
					if err := json.Unmarshal(res.StructuredContent, &sc); err != nil {
						b.Fatal(err)
					}
					out.StructuredContent = sc
				}
				if _, err := json.Marshal(&out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
