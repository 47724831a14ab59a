package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/snfs1"
	"snfs/state"
)

// TestPermitsLostPartial: two directories' permits lost with records of
// each in the log, as after a server restart: d's reclaimed (held), e's
// not, and refused when asked lately. A recall of d sends d's names,
// checked under its permit, and its records, which come first in the log,
// and is answered OK; e's record waits in the log for e's permit. With
// every lost permit asked at once (all or nothing), e's refusal held the
// whole log: the recall failed and the server revoked d's permit.
func TestPermitsLostPartial(t *testing.T) {
	s := newRestartableServer(t)
	if err := os.Mkdir(filepath.Join(s.export, "e"), 0o777); err != nil {
		t.Fatal(err)
	}
	v, sn, d := permitsMount(t, s, "lost-partial")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ent, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "e")
	if err != nil {
		t.Fatal(err)
	}
	e := ent.Inode
	p := sn.permits
	for _, dir := range []struct {
		in         *vfs.Inode
		path, name string
	}{{d, "d", "x"}, {e, "e", "y"}} {
		if err := os.WriteFile(filepath.Join(s.export, dir.path, dir.name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		holdPermit(t, sn, dir.in)
		rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: dir.in.FH}, Name: dir.name}
		if _, err := p.log.AppendLazyBased(rec, []cml.Base{serverBase(t, sn, dir.in, dir.name)}); err != nil {
			t.Fatal(err)
		}
	}
	p.drop(e.FH)
	p.markLost(d.FH, e.FH)
	p.mu.Lock()
	p.lostRefused = time.Now()
	p.mu.Unlock()
	if got := p.recall(ctx, d.FH); got != state.OK {
		t.Fatalf("the recall of d, its permit held and its records first: %v; want OK", got)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "d", "x")); err == nil {
		t.Error("d/x is still on the server after d's recall")
	}
	if _, err := os.Lstat(filepath.Join(s.export, "e", "y")); err != nil {
		t.Errorf("e/y, whose permit is lost: %v; want it there", err)
	}
	if n := p.log.Len(); n != 1 {
		t.Errorf("%d records left; want e's", n)
	}
	p.mu.Lock()
	p.lostRefused = time.Time{}
	p.mu.Unlock()
	if err := sn.SyncDir(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "e", "y")); err == nil {
		t.Error("e/y is still on the server once e's permit is asked again")
	}
	if c := sn.stats.Conflicts.Load(); c != 0 {
		t.Errorf("%d conflicts; want none", c)
	}
}
