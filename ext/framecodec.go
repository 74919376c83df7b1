package ext

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// The two frames every call has, open (host to extension) and end
// (extension to host), are encoded and decoded on the socket with
// protowire instead of proto's reflection-driven Marshal and Unmarshal,
// which cost each side a measurable share of a tool call (~10% of the
// extension process's CPU per call, ~5% of the host's). The bytes are the
// same protobuf: what the fast path does not know (another frame, an
// unknown or repeated field, an end's JSON-RPC error, a string that is
// not UTF-8) goes through proto, which then also gives its errors.

// appendFrame appends f's protobuf encoding to b.
func appendFrame(b []byte, f *extpb.CallFrame) ([]byte, error) {
	switch body := f.GetBody().(type) {
	case *extpb.CallFrame_Open:
		if o := body.Open; o != nil && o.Scope == nil && utf8.ValidString(o.Method) && utf8.ValidString(o.UserId) &&
			utf8.ValidString(o.ConversationId) && utf8.ValidString(o.Name) && utf8.ValidString(o.Caller) {
			b = appendCall(b, f.Call)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(openSize(o)))
			b = appendString(b, 1, o.Method)
			b = appendString(b, 2, o.UserId)
			b = appendString(b, 3, o.ConversationId)
			b = appendString(b, 4, o.Name)
			b = appendBytes(b, 5, o.Params)
			b = appendBytes(b, 6, o.ProgressToken)
			b = appendBytes(b, 7, o.Meta)
			b = appendBytes(b, 8, o.Task)
			b = appendBytes(b, 9, o.Capabilities)
			b = appendBytes(b, 11, o.CallParams)
			return appendString(b, 12, o.Caller), nil
		}
	case *extpb.CallFrame_End:
		if e := body.End; e != nil && e.RpcError == nil && utf8.ValidString(e.Error) {
			b = appendCall(b, f.Call)
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(endSize(e)))
			b = appendBytes(b, 1, e.Result)
			b = appendBytes(b, 2, e.Details)
			if e.Code != 0 {
				b = protowire.AppendTag(b, 3, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(e.Code))
			}
			b = appendString(b, 4, e.Error)
			if e.IsError {
				b = protowire.AppendTag(b, 5, protowire.VarintType)
				b = protowire.AppendVarint(b, 1)
			}
			return b, nil
		}
	case *extpb.CallFrame_CallerCall:
		if m := body.CallerCall; m != nil && utf8.ValidString(m.Name) {
			b = appendCall(b, f.Call)
			b = protowire.AppendTag(b, 8, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(callerCallSize(m)))
			b = appendVarint(b, 1, m.Id)
			b = appendString(b, 2, m.Name)
			b = appendBytes(b, 3, m.Arguments)
			if m.Cancel {
				b = appendVarint(b, 4, 1)
			}
			return b, nil
		}
	case *extpb.CallFrame_CallerResult:
		if r := body.CallerResult; r != nil && utf8.ValidString(r.Error) {
			b = appendCall(b, f.Call)
			b = protowire.AppendTag(b, 9, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(callerResultSize(r)))
			b = appendVarint(b, 1, r.Id)
			b = appendBytes(b, 2, r.Result)
			if r.IsError {
				b = appendVarint(b, 3, 1)
			}
			b = appendVarint(b, 4, uint64(r.Code))
			return appendString(b, 5, r.Error), nil
		}
	}
	return proto.MarshalOptions{}.MarshalAppend(b, f)
}

// appendVarint appends a varint field (nothing for 0, as proto3 does).
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func varintSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func callerCallSize(m *extpb.CallerCall) int {
	n := varintSize(m.Id) + fieldSize(len(m.Name)) + fieldSize(len(m.Arguments))
	if m.Cancel {
		n += 2
	}
	return n
}

func callerResultSize(r *extpb.CallerResult) int {
	n := varintSize(r.Id) + fieldSize(len(r.Result)) + varintSize(uint64(r.Code)) + fieldSize(len(r.Error))
	if r.IsError {
		n += 2
	}
	return n
}

func appendCall(b []byte, call uint64) []byte {
	if call == 0 {
		return b
	}
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	return protowire.AppendVarint(b, call)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// fieldSize is the size of a length-delimited field of n bytes (0 when
// empty: proto3 leaves it out). Every field number here takes a one-byte
// tag.
func fieldSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

func openSize(o *extpb.CallOpen) int {
	return fieldSize(len(o.Method)) + fieldSize(len(o.UserId)) + fieldSize(len(o.ConversationId)) +
		fieldSize(len(o.Name)) + fieldSize(len(o.Params)) + fieldSize(len(o.ProgressToken)) +
		fieldSize(len(o.Meta)) + fieldSize(len(o.Task)) + fieldSize(len(o.Capabilities)) + fieldSize(len(o.CallParams)) +
		fieldSize(len(o.Caller))
}

func endSize(e *extpb.CallEnd) int {
	n := fieldSize(len(e.Result)) + fieldSize(len(e.Details)) + fieldSize(len(e.Error))
	if e.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.Code))
	}
	if e.IsError {
		n += 2
	}
	return n
}

// decodeFrame decodes a frame from b, which it keeps: the bytes fields of
// an open or end frame alias it.
func decodeFrame(b []byte) (*extpb.CallFrame, error) {
	if f := fastFrame(b); f != nil {
		return f, nil
	}
	f := new(extpb.CallFrame)
	if err := proto.Unmarshal(b, f); err != nil {
		return nil, err
	}
	return f, nil
}

// fastFrame decodes an open, end, caller call or caller result frame, or
// returns nil for anything else.
func fastFrame(b []byte) *extpb.CallFrame {
	f := new(extpb.CallFrame)
	var seen uint64 // field numbers met, to leave repeated ones to proto
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > 63 || seen&(1<<num) != 0 {
			return nil
		}
		seen |= 1 << num
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil
			}
			f.Call, b = v, b[n:]
		case (num == 2 || num == 3 || num == 8 || num == 9) && typ == protowire.BytesType && f.Body == nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case 2:
				o := fastOpen(v)
				if o == nil {
					return nil
				}
				f.Body = &extpb.CallFrame_Open{Open: o}
			case 3:
				e := fastEnd(v)
				if e == nil {
					return nil
				}
				f.Body = &extpb.CallFrame_End{End: e}
			case 8:
				m := fastCallerCall(v)
				if m == nil {
					return nil
				}
				f.Body = &extpb.CallFrame_CallerCall{CallerCall: m}
			case 9:
				r := fastCallerResult(v)
				if r == nil {
					return nil
				}
				f.Body = &extpb.CallFrame_CallerResult{CallerResult: r}
			}
		default:
			return nil
		}
	}
	return f
}

func fastOpen(b []byte) *extpb.CallOpen {
	o := new(extpb.CallOpen)
	ok := fastFields(b, 12, func(protowire.Number, uint64) bool { return false }, func(num protowire.Number, v []byte) bool {
		if (num <= 4 || num == 12) && !utf8.Valid(v) {
			return false
		}
		switch num {
		case 1:
			o.Method = string(v)
		case 2:
			o.UserId = string(v)
		case 3:
			o.ConversationId = string(v)
		case 4:
			o.Name = string(v)
		case 5:
			o.Params = v
		case 6:
			o.ProgressToken = v
		case 7:
			o.Meta = v
		case 8:
			o.Task = v
		case 9:
			o.Capabilities = v
		case 11:
			o.CallParams = v
		case 12:
			o.Caller = string(v)
		default: // 10, the scope: proto's
			return false
		}
		return true
	})
	if !ok {
		return nil
	}
	return o
}

func fastEnd(b []byte) *extpb.CallEnd {
	e := new(extpb.CallEnd)
	ok := fastFields(b, 5, func(num protowire.Number, v uint64) bool {
		switch {
		case num == 3 && v <= 1<<32-1: // over 32 bits: proto's to truncate
			e.Code = uint32(v)
		case num == 5:
			e.IsError = v != 0
		default:
			return false
		}
		return true
	}, func(num protowire.Number, v []byte) bool {
		switch {
		case num == 1:
			e.Result = v
		case num == 2:
			e.Details = v
		case num == 4 && utf8.Valid(v):
			e.Error = string(v)
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil
	}
	return e
}

// fastFields walks a message of varint and length-delimited fields
// numbered 1 to maxNum, each at most once, calling varint or bytes by the
// field's wire type; it returns false for anything else (proto's then).
func fastFields(b []byte, maxNum protowire.Number, varint func(protowire.Number, uint64) bool, bytes func(protowire.Number, []byte) bool) bool {
	var seen uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > maxNum || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 || !varint(num, v) {
				return false
			}
			b = b[m:]
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || !bytes(num, v) {
				return false
			}
			b = b[m:]
		default:
			return false
		}
	}
	return true
}

func fastCallerCall(b []byte) *extpb.CallerCall {
	m := new(extpb.CallerCall)
	ok := fastFields(b, 4, func(num protowire.Number, v uint64) bool {
		switch num {
		case 1:
			m.Id = v
		case 4:
			m.Cancel = v != 0
		default:
			return false
		}
		return true
	}, func(num protowire.Number, v []byte) bool {
		switch {
		case num == 2 && utf8.Valid(v):
			m.Name = string(v)
		case num == 3:
			m.Arguments = v
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil
	}
	return m
}

func fastCallerResult(b []byte) *extpb.CallerResult {
	r := new(extpb.CallerResult)
	ok := fastFields(b, 5, func(num protowire.Number, v uint64) bool {
		switch {
		case num == 1:
			r.Id = v
		case num == 3:
			r.IsError = v != 0
		case num == 4 && v <= 1<<32-1:
			r.Code = uint32(v)
		default:
			return false
		}
		return true
	}, func(num protowire.Number, v []byte) bool {
		switch {
		case num == 2:
			r.Result = v
		case num == 5 && utf8.Valid(v):
			r.Error = string(v)
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil
	}
	return r
}
