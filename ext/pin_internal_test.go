package ext

import "testing"

// TestToolPinOverTheWire: a tool's pin mode and approver cross the
// extension boundary unchanged; an unknown mode arrives as the strictest.
func TestToolPinOverTheWire(t *testing.T) {
	for _, m := range []PinMode{"", PinOff, PinWarn, PinBlock} {
		for _, byOp := range []bool{false, true} {
			in := Tool{Name: "s/t", Pin: m, PinByOperator: byOp}
			out := toolFromProto(toolToProto(&in))
			if out.Pin != m || out.PinByOperator != byOp {
				t.Errorf("pin %q/%v came back as %q/%v", m, byOp, out.Pin, out.PinByOperator)
			}
		}
	}
	if out := toolFromProto(toolToProto(&Tool{Name: "s/t", Pin: "bogus"})); out.Pin != PinBlock {
		t.Errorf("an unknown pin mode came back as %q, want block", out.Pin)
	}
}
