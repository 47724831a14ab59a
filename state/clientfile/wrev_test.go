package clientfile

import (
	"testing"

	"snfs/state"
)

// TestConcurrentOpensKeepRule (adversarial review of issue 25 item 2): the
// kernel keeps its pages at an open only if the version they belong to when
// that OPEN was answered is valid for its answer (docs/protocol.md 9). Two
// opens run at once after another client's change: X's grant is applied
// (its reply drops the old pages, keep false, and the pages' version becomes
// the new one) between Y's answer and Y's end. Y's keep must be false too:
// the kernel's pages are the old version's until X's reply is acted on.
// OpenCached reads the pages' version at its own call, after X moved it.
func TestConcurrentOpensKeepRule(t *testing.T) {
	f := New(Config{})
	old := state.OpenReply{CacheEnabled: true, Version: 3, OldVersion: 3}
	opened(t, f, state.Read, old) // the kernel's pages: version 3
	f.Release(t0, state.Read, false)
	changed := state.OpenReply{CacheEnabled: true, Version: 5, OldVersion: 5}
	x, acts := f.OpenBegin(state.Read)
	if !has(f.OpenAnswered(&x, changed, nil), ActCache) {
		t.Fatalf("X: %v, want a grant applied", acts)
	}
	y, _ := f.OpenBegin(state.Read)
	if !has(f.OpenAnswered(&y, changed, nil), ActCache) {
		t.Fatal("Y: want a grant applied")
	}
	if keep, _ := f.OpenCached(&x, changed, true); keep {
		t.Fatal("X keeps the pages of version 3 after an answer of version 5")
	}
	if keep, _ := f.OpenCached(&y, changed, true); keep {
		t.Error("Y keeps the kernel's pages: they were version 3's when Y's OPEN was answered")
	}
}
