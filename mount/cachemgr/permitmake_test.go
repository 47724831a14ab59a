package cachemgr

import (
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// TestProvFH: provisional handles are told from the server's (whose first
// byte is the store's format, never 0xff) and carry their id.
func TestProvFH(t *testing.T) {
	fh := provFH(12345)
	if !isProvFH(fh) {
		t.Fatalf("isProvFH(%x) = false", fh)
	}
	for _, other := range []nfs3.FH{nil, {2, 0, 0, 0}, append(nfs3.FH{2}, fh[1:]...), fh[:len(fh)-1]} {
		if isProvFH(other) {
			t.Errorf("isProvFH(%x) = true", other)
		}
	}
	if string(provFH(1)) == string(provFH(2)) {
		t.Error("two ids, one handle")
	}
	// LSNs start at the clock's microseconds.
	lsn := uint64(time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).UnixMicro())
	for _, id := range []uint64{1, 7, lsn, lsn + 1} {
		if f := provFileID(id); f < vfs.LocalIno || f == ^uint64(0) {
			t.Errorf("provFileID(%d) = %#x: outside the local range", id, f)
		}
	}
	if provFileID(lsn) == provFileID(lsn+1) {
		t.Error("two ids, one file id")
	}
}

// TestProvTableSettle: an object made locally is live until settled; one
// settled with a handle resolves to it and is forgotten with its inode; one
// settled without is gone at once; a second settle changes nothing.
func TestProvTableSettle(t *testing.T) {
	var tb provTable
	a, b := &provObj{id: 1, fh: provFH(1), live: true}, &provObj{id: 2, fh: provFH(2), live: true}
	tb.add(a)
	tb.add(b)
	if !tb.live(a.fh) || !tb.live(b.fh) {
		t.Fatal("not live once added")
	}
	real := nfs3.FH{2, 1, 2, 3}
	attr := &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}
	if fh, ok := tb.settle(1, real, attr, 5); !ok || string(fh) != string(a.fh) {
		t.Fatalf("settle(1) = %x, %v", fh, ok)
	}
	if o, ok := tb.of(a.fh); !ok || o.live || string(o.real) != string(real) || o.gone || o.attr != attr || o.start != 5 {
		t.Errorf("after settle with a handle: %+v, %v", o, ok)
	}
	if _, ok := tb.settle(1, nil, nil, 0); ok {
		t.Error("settled twice")
	}
	if _, ok := tb.settle(2, nil, nil, 0); !ok {
		t.Error("settle(2) refused")
	}
	if _, ok := tb.of(b.fh); ok {
		t.Error("an object that will never exist is still known")
	}
	tb.forget(a.fh)
	if _, ok := tb.of(a.fh); ok {
		t.Error("forget kept a settled object")
	}
}
