package cml

import (
	"context"
	"path/filepath"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// A record naming, by its provisional id, a directory whose MKDIR the
// server has answered is a change of that (real) directory: Dirs, what a
// server restart's RECLAIM_PERMIT and markLost are given, must name it.
func TestDirsProvAnswered(t *testing.T) {
	l := openLog(t, filepath.Join(testDir(t), DirName), Options{})
	w := nfs3.FH("W")
	prov, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: w}, Name: "sub", Attr: nfs3.Sattr{Mode: u32(0o755)}})
	if err != nil {
		t.Fatal(err)
	}
	// the MKDIR acknowledged; a create in the new directory logged
	// meanwhile, by its provisional id, not yet sealed
	if _, err := l.Reintegrate(context.Background(), &fakeServer{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(createIn(snfs1.ObjRef{Prov: prov}, "f")); err != nil {
		t.Fatal(err)
	}
	real, ok := l.Handle(prov)
	if !ok {
		t.Fatal("no handle")
	}
	if !l.ChangesDir(real) {
		t.Fatal("ChangesDir(real) false")
	}
	for _, d := range l.Dirs() {
		if string(d) == string(real) {
			return
		}
	}
	t.Fatalf("Dirs() = %q; lacks the answered directory %q that a record still changes", l.Dirs(), real)
}
