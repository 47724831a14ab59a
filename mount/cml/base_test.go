package cml

import (
	"context"
	"fmt"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// appendingServer is fakeServer that appends more to the log during its
// first call, as the mount's changes go on while a reintegration waits for
// the server.
type appendingServer struct {
	fakeServer
	l    *Log
	more func(l *Log)
}

func (a *appendingServer) Reintegrate(ctx context.Context, p []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if a.more != nil {
		a.more(a.l)
		a.more = nil
	}
	return a.fakeServer.Reintegrate(ctx, p, recs)
}

func wantBase(t *testing.T, l *Log, name string, fh nfs3.FH, ok bool) {
	t.Helper()
	b, got := l.BaseOf(dD.FH, name)
	if got != ok || ok && string(b.FH) != string(fh) {
		t.Fatalf("base of %q: %q %v, want %q %v", name, b.FH, got, fh, ok)
	}
}

// TestBases: a name's base is the one given with its first record left in
// the log (later ones are ignored), comes back from the disk with the
// record, follows each acknowledgement to what the acknowledged records
// left on the server (a made object's handle, none after a removal, the
// moved object at a rename's new name) while records of the name are
// left, goes once none is, and survives a compaction.
func TestBases(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{SegmentBytes: 8 << 10})
	based := func(rec snfs1.CMLRecord, bs ...Base) uint64 {
		t.Helper()
		lsn, err := l.AppendLazyBased(rec, bs)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	b := func(name, fh string) Base {
		var h nfs3.FH
		if fh != "" {
			h = nfs3.FH(fh)
		}
		return Base{Dir: dD.FH, Name: name, FH: h}
	}
	based(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "a"}, b("a", "Ha"))
	based(mv(dD, "b", dD, "c"), b("b", "Hb"), b("c", ""))
	mk := based(createIn(dD, "d"), b("d", ""))
	// The second record of a: its base stays the first's.
	based(createIn(dD, "a"), b("a", ""))
	wantBase(t, l, "a", nfs3.FH("Ha"), true)
	l.Close()
	l = openLog(t, dir, Options{SegmentBytes: 8 << 10})
	wantBase(t, l, "a", nfs3.FH("Ha"), true)
	wantBase(t, l, "b", nfs3.FH("Hb"), true)
	wantBase(t, l, "c", nil, true)
	wantBase(t, l, "d", nil, true)

	// Records of c and d appended while the plan is out: their bases are
	// what the plan left there (b's object at c, the object made at d).
	srv := &appendingServer{l: l, more: func(l *Log) {
		if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "d"}, []Base{b("d", "prov")}); err != nil {
			t.Error(err)
		}
		if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "c"}, []Base{b("c", "stale")}); err != nil {
			t.Error(err)
		}
	}}
	if _, err := l.Reintegrate(context.Background(), srv, nil); err != nil {
		t.Fatal(err)
	}
	made := nfs3.FH(fmt.Sprintf("H%d", mk))
	check := func(l *Log) {
		t.Helper()
		wantBase(t, l, "a", nil, false)
		wantBase(t, l, "b", nil, false)
		wantBase(t, l, "c", nfs3.FH("Hb"), true)
		wantBase(t, l, "d", made, true)
	}
	check(l)
	l.Close()
	l = openLog(t, dir, Options{SegmentBytes: 8 << 10})
	check(l)
	if got := l.NamesChanged([]nfs3.FH{dD.FH}); len(got) != 2 {
		t.Fatalf("names changed: %v", got)
	}

	// A compaction (the log spans segments after reopens) keeps the bases
	// of the records left.
	srv = &appendingServer{l: l, more: func(l *Log) {
		if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dD, Name: "e"}, []Base{b("e", "He")}); err != nil {
			t.Error(err)
		}
	}}
	if _, err := l.Reintegrate(context.Background(), srv, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segments after the reintegration: no compaction", n)
	}
	l.Close()
	l = openLog(t, dir, Options{SegmentBytes: 8 << 10})
	wantBase(t, l, "c", nil, false)
	wantBase(t, l, "e", nfs3.FH("He"), true)
	if _, err := l.Reintegrate(context.Background(), &fakeServer{}, nil); err != nil {
		t.Fatal(err)
	}
	wantBase(t, l, "e", nil, false)
}
