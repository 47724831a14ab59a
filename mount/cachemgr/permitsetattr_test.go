package cachemgr

import (
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// TestLocalSattr: which SETATTRs are made locally (permitsetattr.go), the
// record's attributes and the object's after them.
func TestLocalSattr(t *testing.T) {
	c := vfs.Cred{UID: 1000, GID: 100}
	file := nfs3.Fattr{Type: nfs3.TypeReg, Mode: 0o644, UID: 1000, GID: 200}
	link := nfs3.Fattr{Type: nfs3.TypeLnk, Mode: 0o777, UID: 1000, GID: 100}
	dir := nfs3.Fattr{Type: nfs3.TypeDir, Mode: 0o755, UID: 1000, GID: 100}
	u := func(v uint32) *uint32 { return &v }
	mt := time.Unix(1600000000, 5)
	for _, k := range []struct {
		name string
		cur  nfs3.Fattr
		s    vfs.SetAttr
		ok   bool
	}{
		{"chmod", file, vfs.SetAttr{Mode: u(0o600)}, true},
		{"chmod of a directory, set-group-ID", dir, vfs.SetAttr{Mode: u(0o2775)}, true},
		{"set-user-ID on a file", file, vfs.SetAttr{Mode: u(0o4755)}, false},
		{"set-group-ID on a file", file, vfs.SetAttr{Mode: u(0o2755)}, false},
		{"a link's mode", link, vfs.SetAttr{Mode: u(0o700)}, false},
		{"a link's times", link, vfs.SetAttr{Mtime: &mt}, true},
		{"chown to its owner", file, vfs.SetAttr{UID: u(1000)}, true},
		{"chown to another", file, vfs.SetAttr{UID: u(1001)}, false},
		{"chgrp to its group", file, vfs.SetAttr{GID: u(200)}, true},
		{"chgrp to the caller's", file, vfs.SetAttr{GID: u(100)}, true},
		{"chgrp to another", file, vfs.SetAttr{GID: u(300)}, false},
		{"not the caller's", nfs3.Fattr{Type: nfs3.TypeReg, Mode: 0o666, UID: 0}, vfs.SetAttr{Mode: u(0o600)}, false},
	} {
		sa, next, ok := localSattr(k.cur, c, k.s)
		if ok != k.ok {
			t.Errorf("%s: local %v, want %v", k.name, ok, k.ok)
			continue
		}
		if !ok {
			continue
		}
		if k.s.Mode != nil && (sa.Mode == nil || *sa.Mode != *k.s.Mode || next.Mode != *k.s.Mode) {
			t.Errorf("%s: record %+v, object %+v", k.name, sa, next)
		}
		if k.s.GID != nil && (sa.GID == nil || next.GID != *k.s.GID) {
			t.Errorf("%s: record %+v, object %+v", k.name, sa, next)
		}
	}
	// Times: given, or the mount's clock for "now", always sent as the
	// client's time, and the change time moves.
	before := vfs.NFSTime(time.Now())
	now := time.Time{}
	sa, next, ok := localSattr(file, c, vfs.SetAttr{Atime: &now, Mtime: &mt})
	if !ok || sa.Mtime.How != nfs3.SetToClientTime || sa.Mtime.Time != vfs.NFSTime(mt) || next.Mtime != vfs.NFSTime(mt) {
		t.Fatalf("mtime: record %+v, object %+v", sa.Mtime, next.Mtime)
	}
	if sa.Atime.How != nfs3.SetToClientTime || sa.Atime.Time != next.Atime || vfs.TimeAfter(before, next.Atime) {
		t.Fatalf("atime now: record %+v, object %+v", sa.Atime, next.Atime)
	}
	if vfs.TimeAfter(before, next.Ctime) || sa.Mode != nil || sa.UID != nil || sa.GID != nil || sa.Size != nil {
		t.Fatalf("record %+v, object %+v", sa, next)
	}
}
