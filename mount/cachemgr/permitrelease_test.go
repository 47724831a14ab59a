package cachemgr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// TestPermitsRemovedDirsGivenBack: five directories made and removed
// locally leave the mount and the server holding the parent's permit only.
// They held six: the permits MKDIR's reintegration gave on the new
// directories were kept until unmount, and a long-lived mount reached the
// server's bound of permits.
func TestPermitsRemovedDirsGivenBack(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMount(t, s, "permits-gone")
	holdPermit(t, sn, d)
	p := sn.permits
	ctx := context.Background()
	c := vfs.Cred{}
	if _, err := v.Lookup(ctx, d, c, "none"); err == nil { // d's listing, so that MKDIR is made locally
		t.Fatal("a name in d")
	}
	local := sn.stats.LocalChanges.Load()
	var subs []*vfs.Inode
	for i := range 5 {
		e, err := v.Mkdir(ctx, d, c, fmt.Sprintf("sub%d", i), 0o755)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, e.Inode)
	}
	if err := p.flush(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if n := len(p.refs()); n != 6 {
		t.Fatalf("%d permits held after 5 MKDIRs reintegrated, want 6", n)
	}
	for i, sub := range subs {
		// The new directory's listing, so that its RMDIR is made locally.
		if _, err := v.Lookup(ctx, sub, c, "none"); err == nil {
			t.Fatal("a name in a new directory")
		}
		if err := v.Rmdir(ctx, d, c, fmt.Sprintf("sub%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := sn.stats.LocalChanges.Load() - local; got != 10 {
		t.Fatalf("%d changes made locally, want 10 (5 MKDIRs, 5 RMDIRs)", got)
	}
	if p.releaseIdle(time.Now()) != 0 {
		t.Fatal("permits of removed directories given back before their RMDIRs were sent")
	}
	if err := p.flush(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if n := p.releaseIdle(time.Now()); n != 5 {
		t.Fatalf("%d permits given back, want the 5 removed directories'", n)
	}
	if refs := p.refs(); len(refs) != 1 || string(refs[0].Dir) != string(d.FH) {
		t.Fatalf("the mount holds %d permits after the directories went, want d's only", len(refs))
	}
	if st := s.srv.PermitStats(); st.Permits != 1 {
		t.Fatalf("the server holds %d permits, want d's only", st.Permits)
	}
}

// TestPermitsIdleGivenBack: a permit no local change asked for in
// permitIdle, with nothing of its directory logged, is given back
// (PERMIT_RELEASE); one used lately, or with records logged, is kept.
// Before, every permit was held until unmount.
func TestPermitsIdleGivenBack(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMount(t, s, "permits-idle")
	holdPermit(t, sn, d)
	p := sn.permits
	now := time.Now()
	if p.releaseIdle(now.Add(permitBusy)) != 0 {
		t.Fatal("a permit in use given back")
	}
	logCreates(t, sn, d, "f", 3)
	if p.releaseIdle(now.Add(2*permitIdle)) != 0 {
		t.Fatal("a permit with records logged given back")
	}
	if err := p.flush(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	// A file's SETATTR is sent under any permit the batch names.
	f, err := v.Lookup(context.Background(), d, vfs.Cred{}, "f0")
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{FH: f.Inode.FH}, Attr: nfs3.Sattr{Mode: &mode}}); err != nil {
		t.Fatal(err)
	}
	if p.releaseIdle(now.Add(2*permitIdle)) != 0 {
		t.Fatal("a permit given back with a file's SETATTR logged")
	}
	if err := p.flush(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	p.get(context.Background(), d.FH, false) // a local change asks for it: used now
	if p.releaseIdle(time.Now().Add(permitIdle/2)) != 0 {
		t.Fatal("a permit used lately given back")
	}
	if p.releaseIdle(time.Now().Add(2*permitIdle)) != 1 {
		t.Fatal("an idle permit not given back")
	}
	if refs := p.refs(); len(refs) != 0 {
		t.Fatalf("the mount holds %+v after giving it back", refs)
	}
	if st := s.srv.PermitStats(); st.Permits != 0 || st.Releases != 1 {
		t.Fatalf("server: %+v", st)
	}
	wantFiles(t, s.export, "f", 3)
}

// TestPermitsHighWater: above permitHighWater permits, the least recently
// used ones unused for permitBusy are given back down to permitLowWater,
// however short their idleness; the most recently used stay.
func TestPermitsHighWater(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-highwater")
	holdPermit(t, sn, d)
	p := sn.permits
	now := time.Now()
	p.mu.Lock()
	real := p.held[string(d.FH)]
	for i := range permitHighWater + 10 {
		// Permits the server never gave: given back, they are answered as
		// not held.
		fh := append(append([]byte(nil), d.FH...), byte(i>>8), byte(i))
		h := real
		h.ref.Dir, h.ref.Permit, h.used = fh, uint64(1e9+i), now.Add(-time.Duration(i+1)*100*time.Millisecond-permitBusy)
		p.held[string(fh)] = h
	}
	real.used = now
	p.held[string(d.FH)] = real
	total := len(p.held)
	p.mu.Unlock()
	if n := p.releaseIdle(now); n != total-permitLowWater {
		t.Fatalf("%d permits given back of %d, want %d", n, total, total-permitLowWater)
	}
	p.mu.Lock()
	_, kept := p.held[string(d.FH)]
	p.mu.Unlock()
	if !kept {
		t.Fatal("the permit in use given back")
	}
}

// TestPermitRecallFailedReintegration: a recall whose reintegration fails
// with records of the directory still in the log is answered FAILED (the
// server revokes the permit), not OK (the server took the changes as in,
// and let the changes it held back go on before them). The permit is
// forgotten and the records stay in the log. The reintegration fails for
// certain here: the server is down, so the call cannot have been applied,
// and the callback's context is done (its connection gone). After the
// server's restart the records are sent under the permit asked again
// (section 21.6); with the server up, they would be refused without a
// permit and kept as conflicts, as those of any permit revoked.
func TestPermitRecallFailedReintegration(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-recall-failed")
	holdPermit(t, sn, d)
	p := sn.permits
	logCreates(t, sn, d, "f", 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.stop()
	t.Cleanup(func() { // before the mount's: its Sync needs the server
		if s.srv == nil {
			s.start(s.addr)
		}
	})
	if o := p.recall(ctx, d.FH); o != state.Failed {
		t.Fatalf("recall answered %v after a failed reintegration, want Failed", o)
	}
	if n := p.log.Len(); n != 3 {
		t.Fatalf("%d records left in the log, want 3", n)
	}
	if refs := p.refs(); len(refs) != 0 {
		t.Fatalf("the permit is still held after its recall: %+v", refs)
	}
	e, err := os.ReadDir(filepath.Join(s.export, "d"))
	if err != nil || len(e) != 0 {
		t.Fatalf("the export's d holds %v (%v): nothing can have been applied", e, err)
	}
	s.start(s.addr)
	if err := p.flush(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, s.export, "f", 3)
	// Nothing logged of the directory: the recall is answered OK, its
	// context done or not.
	holdPermit(t, sn, d)
	if o := p.recall(ctx, d.FH); o != state.OK {
		t.Fatalf("recall with nothing logged answered %v", o)
	}
}
