package ext

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// frameSamples are frames of every kind, the fast ones in their usual and
// their edge shapes.
func frameSamples() []*extpb.CallFrame {
	return []*extpb.CallFrame{
		{Call: 1, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "alice", Name: "notes/echo", Params: []byte(`{"text":"hi"}`)}}},
		{Call: 1 << 40, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "bob", ConversationId: "c1", Name: "x", Params: []byte(`{}`),
			ProgressToken: []byte(`"t"`), Meta: []byte(`{"a":1}`), Task: []byte(`{"ttl":1}`), Capabilities: []byte(`{"roots":{}}`), Caller: "c0ffee"}}},
		{Call: 2, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{}}},
		{Call: 3, Body: &extpb.CallFrame_End{End: &extpb.CallEnd{Result: []byte(`{"content":[]}`)}}},
		{Call: 4, Body: &extpb.CallFrame_End{End: &extpb.CallEnd{Details: []byte(`{}`), Code: 5, Error: "not found", IsError: true}}},
		{Call: 5, Body: &extpb.CallFrame_End{End: &extpb.CallEnd{Code: 1<<32 - 1}}},
		{Body: &extpb.CallFrame_End{End: &extpb.CallEnd{}}},
		{Call: 6, Body: &extpb.CallFrame_Cancel{Cancel: true}},
		{Call: 7, Body: &extpb.CallFrame_Notify{Notify: &extpb.SessionMessage{Method: "notifications/progress", Params: []byte(`{}`)}}},
		{Call: 8, Body: &extpb.CallFrame_Request{Request: &extpb.SessionMessage{Id: 9, Method: "roots/list"}}},
		{Call: 9, Body: &extpb.CallFrame_Reply{Reply: &extpb.SessionReply{Id: 9, Result: []byte(`{}`)}}},
		{Call: 10},
		// Strings that are not UTF-8 are proto's to refuse.
		{Call: 11, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "\xff"}}},
		{Call: 12, Body: &extpb.CallFrame_End{End: &extpb.CallEnd{Error: "\xfe"}}},
		// A scoped caller's open (field 10) goes through proto both ways.
		{Call: 14, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "alice", Name: "code/run",
			Scope: &extpb.Scope{Servers: []string{"notes"}, Tools: []string{"notes/list_*"}}}}},
		// A client's raw params (field 11), alone and with a scope.
		{Call: 15, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "alice", Name: "notes/echo",
			CallParams: []byte(`{"name":"notes_echo","arguments":{"text":"hi"},"_meta":{"progressToken":1}}`)}}},
		{Call: 16, Body: &extpb.CallFrame_Open{Open: &extpb.CallOpen{Method: "tools/call", UserId: "alice", Name: "notes/echo",
			CallParams: []byte(`{"name":"notes/echo"}`), Scope: &extpb.Scope{Servers: []string{"notes"}}}}},
		// Caller calls and their results, in their usual and edge shapes.
		{Call: 17, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{Id: 1, Name: "notes/echo", Arguments: []byte(`{"text":"hi"}`)}}},
		{Call: 17, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{Id: 1 << 50, Cancel: true}}},
		{Call: 17, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{}}},
		{Call: 17, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{Id: 2, Name: "\xff"}}},
		{Call: 18, Body: &extpb.CallFrame_CallerResult{CallerResult: &extpb.CallerResult{Id: 1, Result: []byte(`{"content":[]}`), IsError: true}}},
		{Call: 18, Body: &extpb.CallFrame_CallerResult{CallerResult: &extpb.CallerResult{Id: 3, Code: 1<<32 - 1, Error: "not found"}}},
		{Call: 18, Body: &extpb.CallFrame_CallerResult{CallerResult: &extpb.CallerResult{}}},
		{Call: 18, Body: &extpb.CallFrame_CallerResult{CallerResult: &extpb.CallerResult{Id: 4, Error: "\xfe"}}},
		{Call: 13, Body: &extpb.CallFrame_End{End: &extpb.CallEnd{Code: 2, Error: "sign in (code -32042)",
			RpcError: &extpb.RPCError{Code: -32042, Message: "sign in", Data: []byte(`{"elicitations":[]}`)}}}},
	}
}

// TestFrameEncoding checks the hand-written encoder against proto's: the
// same bytes for every frame, and proto's error for what it refuses.
func TestFrameEncoding(t *testing.T) {
	for i, f := range frameSamples() {
		want, werr := proto.MarshalOptions{Deterministic: true}.Marshal(f)
		got, gerr := appendFrame([]byte("pre"), f)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("frame %d: error %v, proto's %v", i, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !bytes.HasPrefix(got, []byte("pre")) || !bytes.Equal(got[3:], want) {
			t.Errorf("frame %d: encoded %x, proto %x", i, got, want)
		}
	}
}

// TestFrameDecoding decodes every sample, proto's bytes and odd ones
// (fields repeated, out of order, unknown), as proto does.
func TestFrameDecoding(t *testing.T) {
	var inputs [][]byte
	for _, f := range frameSamples() {
		if b, err := proto.Marshal(f); err == nil {
			inputs = append(inputs, b)
		}
	}
	inputs = append(inputs,
		// a call ID after the body, and given twice
		[]byte("\x12\x02\x0a\x00\x08\x07"), []byte("\x08\x01\x08\x02\x12\x00"),
		// an open and then an end (the oneof's last wins)
		[]byte("\x12\x02\x0a\x00\x1a\x02\x20\x01"),
		// an unknown field in the open, a field repeated in the end
		[]byte("\x12\x03\x50\x01\x00"), []byte("\x1a\x04\x0a\x00\x0a\x00"),
		// the end's code as bytes, a code over 32 bits, is_error 2
		[]byte("\x1a\x02\x1a\x00"), []byte("\x1a\x06\x18\xff\xff\xff\xff\x1f"), []byte("\x1a\x02\x28\x02"),
		// a caller call and then a caller result, a caller result's code over
		// 32 bits, a caller call's id as bytes, its cancel 2, an unknown field
		[]byte("\x42\x02\x08\x01\x4a\x02\x08\x02"), []byte("\x4a\x06\x20\xff\xff\xff\xff\x1f"),
		[]byte("\x42\x02\x0a\x00"), []byte("\x42\x02\x20\x02"), []byte("\x42\x02\x30\x01"),
		// truncated
		[]byte("\x12\x05\x0a\x03ab"), []byte("\x08"), []byte("\x12"),
	)
	for _, in := range inputs {
		checkDecode(t, in)
	}
}

func checkDecode(t *testing.T, in []byte) {
	t.Helper()
	want := new(extpb.CallFrame)
	werr := proto.Unmarshal(in, want)
	got, gerr := decodeFrame(bytes.Clone(in))
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%x: error %v, proto's %v", in, gerr, werr)
	}
	if werr == nil && !proto.Equal(got, want) {
		t.Fatalf("%x: decoded %v, proto %v", in, got, want)
	}
}

func FuzzFrameDecoding(f *testing.F) {
	for _, s := range frameSamples() {
		if b, err := proto.Marshal(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkDecode(t, in) })
}
