package state

import "testing"

// TestVocabulary: the names and helpers of the modes and outcomes that snfs1
// puts on the wire (openmode1, cbmode1, cbstat1 are these types).
func TestVocabulary(t *testing.T) {
	for _, c := range []struct {
		m         CallbackMode
		wb, inval bool
		name      string
	}{
		{Writeback, true, false, "WRITEBACK"},
		{Invalidate, false, true, "INVALIDATE"},
		{WritebackInvalidate, true, true, "WRITEBACK_INVALIDATE"},
		{Relinquish, true, false, "RELINQUISH"},
		{RecallLocks, false, false, "RECALL_LOCKS"},
		{RecallPermit, false, false, "RECALL_PERMIT"},
	} {
		if c.m.WritesBack() != c.wb || c.m.Invalidates() != c.inval || c.m.String() != c.name {
			t.Errorf("%d: WritesBack %v Invalidates %v String %q", uint8(c.m), c.m.WritesBack(), c.m.Invalidates(), c.m.String())
		}
	}
	if Read.String() != "read" || Write.String() != "write" || Mode(9).String() != "Mode(9)" {
		t.Error("Mode.String")
	}
	for o, name := range map[Outcome]string{OK: "OK", TreatAsClosed: "TREAT_AS_CLOSED", Stale: "STALE", Pinned: "PINNED", Failed: "FAILED", 99: "?"} {
		if o.String() != name {
			t.Errorf("Outcome %d: String %q, want %q", uint8(o), o.String(), name)
		}
	}
	// The wire values (docs/protocol.md section 3): snfs1 encodes these as they are.
	if Read != 1 || Write != 2 || Writeback != 1 || Relinquish != 4 || OK != 0 || TreatAsClosed != 1 || Stale != 2 || Pinned != 3 || MaxAnswer != Pinned {
		t.Error("wire values changed")
	}
}
