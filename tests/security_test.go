package tests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/client"
	"snfs/mount3"
	"snfs/nfs3"
	"snfs/server"
)

// TestIdentity: operations run with the caller's AUTH_SYS identity, so ownership
// and permission answers are the local file system's own.
func TestIdentity(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,root_squash")
	u := e.as(1000, 1000)
	f := e.create(u, e.root, "mine", 0o644)
	var st syscall.Stat_t
	syscall.Stat(e.path("mine"), &st)
	if st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("file created by uid 1000 is owned by %d:%d", st.Uid, st.Gid)
	}
	// root is squashed to 65534 on this export.
	e.create(e.nfs.As(0, 0), e.root, "squashed", 0o644)
	syscall.Stat(e.path("squashed"), &st)
	if st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("root_squash: owned by %d:%d", st.Uid, st.Gid)
	}

	// A root-owned 0644 file and 0755 directory, made locally.
	os.WriteFile(e.path("rootfile"), []byte("x"), 0o644)
	os.Mkdir(e.path("rootdir"), 0o755)
	os.WriteFile(e.path("rootdir/f"), []byte("x"), 0o644)
	rf, rd := e.lookup(e.root, "rootfile"), e.lookup(e.root, "rootdir")
	w, err := u.Write(ctx, rf, 0, []byte("y"), nfs3.FileSync)
	want(t, "WRITE to root's 0644 file as uid 1000", w.Status, err, nfs3.ErrAcces)
	rm, err := u.Remove(ctx, rd, "f")
	want(t, "REMOVE from root's 0755 dir as uid 1000", rm.Status, err, nfs3.ErrAcces)
	cr, err := u.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: rd, Name: "new"}, Mode: nfs3.Guarded})
	want(t, "CREATE in root's 0755 dir as uid 1000", cr.Status, err, nfs3.ErrAcces)
	sa, err := u.Setattr(ctx, &nfs3.SetattrArgs{Object: rf, New: nfs3.Sattr{Mode: u32p(0o777)}})
	want(t, "chmod of root's file as uid 1000", sa.Status, err, nfs3.ErrPerm)
	ac, err := u.Access(ctx, rf, 0x3f)
	ok(t, "ACCESS", ac.Status, err)
	if ac.Access != nfs3.AccessRead {
		t.Fatalf("ACCESS of root's 0644 file for uid 1000 = %#x, want READ only", ac.Access)
	}
	// Supplementary groups count: a 0660 file of group 2000.
	os.WriteFile(e.path("groupfile"), []byte("x"), 0o660)
	os.Chown(e.path("groupfile"), 0, 2000)
	gf := e.lookup(e.root, "groupfile")
	w, err = u.Write(ctx, gf, 0, []byte("y"), nfs3.Unstable)
	want(t, "WRITE without the group", w.Status, err, nfs3.ErrAcces)
	w, err = e.as(1000, 1000, 2000).Write(ctx, gf, 0, []byte("y"), nfs3.Unstable)
	ok(t, "WRITE with supplementary group 2000", w.Status, err)
	// Owner override: the owner writes a file it made read-only (as tar does).
	sa, err = u.Setattr(ctx, &nfs3.SetattrArgs{Object: f, New: nfs3.Sattr{Mode: u32p(0o444)}})
	ok(t, "chmod 0444 by owner", sa.Status, err)
	w, err = u.Write(ctx, f, 0, []byte("still mine"), nfs3.FileSync)
	ok(t, "owner WRITE to own 0444 file", w.Status, err)
	// A search-denied directory blocks LOOKUP.
	os.Mkdir(e.path("private"), 0o700)
	os.WriteFile(e.path("private/secret"), nil, 0o644)
	lk, err := u.Lookup(ctx, e.lookup(e.root, "private"), "secret")
	want(t, "LOOKUP in a 0700 root dir as uid 1000", lk.Status, err, nfs3.ErrAcces)
}

// TestHandles: handles are opaque, at most 64 bytes, unforgeable, stale once the
// object is gone, and never resolve symlinks or leave the export.
func TestHandles(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	c := e.nfs
	f := e.create(c, e.root, "f", 0o644)
	if len(f) > nfs3.FHSize || len(e.root) > nfs3.FHSize {
		t.Fatalf("handle of %d bytes", len(f))
	}
	forged := append(nfs3.FH{}, f...)
	forged[len(forged)-1] ^= 1
	ga, err := c.Getattr(ctx, forged)
	want(t, "GETATTR with a forged MAC", ga.Status, err, nfs3.ErrBadHandle)
	ga, err = c.Getattr(ctx, nfs3.FH{1, 2, 3})
	want(t, "GETATTR with a short handle", ga.Status, err, nfs3.ErrBadHandle)
	// A symlink pointing outside the export is never followed by the server.
	os.Symlink("/etc", e.path("escape"))
	esc := e.lookup(e.root, "escape")
	lk, err := c.Lookup(ctx, esc, "passwd")
	want(t, "LOOKUP through a symlink", lk.Status, err, nfs3.ErrNotDir)
	rd, err := c.Read(ctx, esc, 0, 100)
	want(t, "READ of a symlink", rd.Status, err, nfs3.ErrInval)
	up := e.lookup(e.root, "..")
	if string(up) != string(e.root) {
		t.Fatal("LOOKUP .. at the root left the export")
	}
	// Stale after removal, also when the object was deleted behind the server's back.
	os.Remove(e.path("f"))
	ga, err = c.Getattr(ctx, f)
	want(t, "GETATTR of a file removed locally", ga.Status, err, nfs3.ErrStale)
}

// TestExportRules: a client outside the export's networks gets MNT3ERR_ACCES, and
// NFS3ERR_ACCES for every handle it presents; ro exports refuse changes.
func TestExportRules(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	open := diskTempDir(t, "snfs-open-")
	closed := diskTempDir(t, "snfs-closed-")
	ro := diskTempDir(t, "snfs-ro-")
	rw, _ := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	rdonly, _ := server.ParseOptions(server.DefaultOptions, "ro")
	_, tenNet, _ := net.ParseCIDR("10.0.0.0/8")
	e := newEnvConfig(t, open, []server.ExportConfig{
		{Path: open, Clients: []server.ClientRule{{Spec: "127.0.0.0/8", Net: &net.IPNet{IP: net.IPv4(127, 0, 0, 0), Mask: net.CIDRMask(8, 32)}, Opts: rw}}},
		{Path: closed, Clients: []server.ClientRule{{Spec: "10.0.0.0/8", Net: tenNet, Opts: rw}}},
		{Path: ro, Clients: []server.ClientRule{{Spec: "*", Opts: rdonly}}},
	})
	m, err := client.DialMount(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, closed)
	if err != nil || res.Status != mount3.ErrAcces {
		t.Fatalf("MNT of a closed export: %v %v", err, res.Status)
	}
	res, err = m.Mnt(ctx, "/nonexistent")
	if err != nil || res.Status != mount3.ErrNoEnt {
		t.Fatalf("MNT of a non-export: %v %v", err, res.Status)
	}
	// A handle of the closed export, obtained by a client that was allowed: the
	// store issues the same handle, so take it from a second server view.
	ex, err := m.Export(ctx)
	if err != nil || len(ex) != 3 || ex[1].Dir != closed || ex[1].Groups[0] != "10.0.0.0/8" {
		t.Fatalf("EXPORT = %+v, %v", ex, err)
	}
	dump, err := m.Dump(ctx)
	if err != nil || len(dump) == 0 || dump[0].Directory != open {
		t.Fatalf("DUMP = %+v, %v", dump, err)
	}
	closedRoot := rootHandleOf(t, e, closed)
	ga, err := e.nfs.Getattr(ctx, closedRoot)
	want(t, "GETATTR on a closed export's handle", ga.Status, err, nfs3.ErrAcces)

	roRes, err := m.Mnt(ctx, ro)
	if err != nil || roRes.Status != mount3.OK {
		t.Fatalf("MNT ro: %v %v", err, roRes.Status)
	}
	cr, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: roRes.FH, Name: "x"}, Mode: nfs3.Guarded})
	want(t, "CREATE on a ro export", cr.Status, err, nfs3.ErrROFS)
	ac, err := e.nfs.Access(ctx, roRes.FH, 0x3f)
	ok(t, "ACCESS on ro", ac.Status, err)
	if ac.Access&(nfs3.AccessModify|nfs3.AccessExtend|nfs3.AccessDelete) != 0 {
		t.Fatalf("ACCESS on a ro export grants %#x", ac.Access)
	}
	if err := m.Umnt(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := m.Umntall(ctx); err != nil {
		t.Fatal(err)
	}
	if dump, _ := m.Dump(ctx); len(dump) != 0 {
		t.Fatalf("DUMP after UMNTALL = %+v", dump)
	}
}

// rootHandleOf gets the root handle of path by starting a throwaway server with
// the same handle key that exports it to everyone (handles depend only on the
// export path, the kernel handle and the state directory's key). Its state
// directory is a copy of the key alone: a server's consistency state is locked
// by the server that runs on it.
func rootHandleOf(t *testing.T, e *env, path string) nfs3.FH {
	rw, _ := server.ParseOptions(server.DefaultOptions, "rw")
	cfg := e.cfg
	cfg.StateDir = diskTempDir(t, "snfs-state-copy-")
	files, _ := os.ReadDir(e.stateDir)
	for _, f := range files {
		if f.Name() == "consist.db" || f.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(e.stateDir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.StateDir, f.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Exports = []server.ExportConfig{{Path: path, Clients: []server.ClientRule{{Spec: "*", Opts: rw}}}}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	return s.RootHandle(path)
}

// TestAuthNone: AUTH_NONE callers are the anonymous user.
func TestAuthNone(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	c := &client.NFS{Client: e.nfs.WithAuth(noneAuth)}
	e.create(c, e.root, "anon", 0o644)
	var st syscall.Stat_t
	syscall.Stat(e.path("anon"), &st)
	if st.Uid != 65534 {
		t.Fatalf("AUTH_NONE created a file owned by %d", st.Uid)
	}
}

// TestReaddirStreamPermission: a directory stream kept open between READDIR calls
// for one caller does not let another caller, who may not read the directory,
// continue the listing.
func TestReaddirStreamPermission(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,root_squash")
	os.Mkdir(e.path("priv"), 0o700)
	for i := 0; i < 500; i++ {
		os.WriteFile(e.path(fmt.Sprintf("priv/f%03d", i)), nil, 0o644)
	}
	os.Chown(e.path("priv"), 1000, 1000)
	dir := e.lookup(e.root, "priv")
	owner, other := e.as(1000, 1000), e.as(2000, 2000)
	res, err := owner.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Count: 1024})
	ok(t, "READDIR by the owner", res.Status, err)
	if res.EOF || len(res.Entries) == 0 {
		t.Fatal("expected a partial listing")
	}
	next := res.Entries[len(res.Entries)-1].Cookie
	res2, err := other.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Cookie: next, Count: 1024})
	want(t, "READDIR continued by another user", res2.Status, err, nfs3.ErrAcces)
	res3, err := owner.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Cookie: next, Count: 1024})
	ok(t, "READDIR continued by the owner", res3.Status, err)
	if len(res3.Entries) == 0 || res3.Entries[0].Name == res.Entries[len(res.Entries)-1].Name {
		t.Fatalf("continuation repeats or is empty: %v", res3.Entries[:min(2, len(res3.Entries))])
	}
}
