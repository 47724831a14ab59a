package cml

import (
	"context"
	"errors"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// TestBasesAckGap replays takeReply's steps by hand with a record of
// the same name appended while the ACK frame is being flushed (waitFlushed
// releases mu around the fdatasync): live, the name's base follows the
// acknowledgement; after a reopen it must be the same.
func TestBasesAckGap(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{SegmentBytes: 8 << 10})
	lsn, err := l.AppendLazyBased(createIn(dD, "x"), []Base{{Dir: dD.FH, Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := l.seal(&res); err != nil {
		t.Fatal(err)
	}
	hx := nfs3.FH("Hx")
	f := frame{kind: kindAck, applied: lsn, handles: []provHandle{{lsn, hx}}}
	l.mu.Lock()
	if _, err := l.write(appendFrame(nil, &f)); err != nil {
		t.Fatal(err)
	}
	l.mu.Unlock()
	// The gap: waitFlushed's fdatasync runs without mu.
	if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "x"}, []Base{{Dir: dD.FH, Name: "x", FH: hx}}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.handles[lsn] = hx
	l.ackPlan(lsn)
	l.mu.Unlock()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	wantBase(t, l, "x", hx, true)
	l.Close()
	l = openLog(t, dir, Options{SegmentBytes: 8 << 10})
	wantBase(t, l, "x", hx, true)
}

// TestBasesSkipped: a record kept as a conflict (Skip) was the only one
// of its name: nothing left changes the name, so its base should go, and a
// later record's base (what the mount sees then) count.
func TestBasesSkipped(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{SegmentBytes: 8 << 10})
	lsn, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "x"}, []Base{{Dir: dD.FH, Name: "x", FH: nfs3.FH("H0")}})
	if err != nil {
		t.Fatal(err)
	}
	var ce *ConflictError
	if _, err := l.Reintegrate(context.Background(), &fakeServer{failAt: lsn}, nil); !errors.As(err, &ce) {
		t.Fatalf("want a conflict, got %v", err)
	}
	if err := l.Skip(lsn); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "x"}, []Base{{Dir: dD.FH, Name: "x", FH: nfs3.FH("Hnew")}}); err != nil {
		t.Fatal(err)
	}
	wantBase(t, l, "x", nfs3.FH("Hnew"), true)
}
