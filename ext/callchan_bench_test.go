package ext

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// echoCaller answers every tool call with one raw text result.
type echoCaller struct{ Extension }

var echoResult = json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`)

func (echoCaller) CallTool(context.Context, *CallToolRequest) (*CallToolResult, error) {
	return &CallToolResult{Raw: echoResult}, nil
}

// BenchmarkCallChannel measures one tool call over the call channel on a
// real socketpair, both ends in this process (host side, frames, extension
// side; no tool work): sequential calls, and 8 callers at once. Allocations
// are both sides'.
func BenchmarkCallChannel(b *testing.B) {
	hostEnd, extEnd, err := NewCallChannel()
	if err != nil {
		b.Skipf("SKIPPED: no socketpair for the call channel: %v", err)
	}
	hfc, err := newSockFrames(hostEnd)
	if err != nil {
		b.Fatal(err)
	}
	efc, err := newSockFrames(extEnd)
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveCalls(context.Background(), efc, echoCaller{}, nil) }()
	cc := newCallClient(hfc, nil)
	defer func() {
		cc.close()
		if err := <-served; err != nil {
			b.Error(err)
		}
	}()
	call := func() error {
		open := &extpb.CallOpen{Method: methodCallTool, UserId: "alice", Name: "notes/echo", Params: []byte(`{"text":"hello"}`)}
		_, err := cc.do(context.Background(), open, SessionOf(nil))
		return err
	}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("8callers", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
