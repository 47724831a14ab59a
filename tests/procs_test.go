package tests

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"snfs/nfs3"
)

// TestProcedures walks through all 22 NFSv3 procedures on one export, checking
// results against the local file system underneath.
func TestProcedures(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	c := e.nfs

	if err := c.Null(ctx); err != nil {
		t.Fatal("NULL:", err)
	}
	ga, err := c.Getattr(ctx, e.root)
	ok(t, "GETATTR root", ga.Status, err)
	if ga.Attr.Type != nfs3.TypeDir {
		t.Fatalf("root type %v", ga.Attr.Type)
	}

	// CREATE + WRITE + READ + COMMIT
	f := e.create(c, e.root, "file", 0o640)
	st, _ := os.Stat(e.path("file"))
	if st.Mode().Perm() != 0o640 {
		t.Fatalf("created mode %v", st.Mode())
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	w, err := c.Write(ctx, f, 0, data, nfs3.Unstable)
	ok(t, "WRITE", w.Status, err)
	if w.Count != uint32(len(data)) || w.Committed != nfs3.Unstable || w.Wcc.Before == nil || w.Wcc.After == nil || w.Wcc.After.Size != uint64(len(data)) {
		t.Fatalf("WRITE result %+v", w)
	}
	cm, err := c.Commit(ctx, f, 0, 0)
	ok(t, "COMMIT", cm.Status, err)
	if cm.Verf != w.Verf {
		t.Fatal("COMMIT verifier differs from WRITE's with no restart")
	}
	for _, stable := range []nfs3.StableHow{nfs3.DataSync, nfs3.FileSync} {
		w, err := c.Write(ctx, f, uint64(len(data)), []byte("tail"), stable)
		ok(t, "WRITE "+stable.String(), w.Status, err)
		if w.Committed < stable {
			t.Fatalf("WRITE %v answered %v", stable, w.Committed)
		}
	}
	rd, err := c.Read(ctx, f, 0, uint32(len(data)+100))
	ok(t, "READ", rd.Status, err)
	if !rd.EOF || !bytes.Equal(rd.Data, append(append([]byte{}, data...), "tail"...)) {
		t.Fatalf("READ eof=%v len=%d", rd.EOF, len(rd.Data))
	}
	rd, err = c.Read(ctx, f, 0, 10)
	ok(t, "READ part", rd.Status, err)
	if rd.EOF || string(rd.Data) != "0123456789" {
		t.Fatalf("partial READ eof=%v %q", rd.EOF, rd.Data)
	}

	// SETATTR: size, mode, times; and the ctime guard.
	sa, err := c.Setattr(ctx, &nfs3.SetattrArgs{Object: f, New: nfs3.Sattr{Size: u64p(10), Mode: u32p(0o600),
		Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: 1000000000}}}})
	ok(t, "SETATTR", sa.Status, err)
	st, _ = os.Stat(e.path("file"))
	if st.Size() != 10 || st.Mode().Perm() != 0o600 || st.ModTime().Unix() != 1000000000 {
		t.Fatalf("after SETATTR: size %d mode %v mtime %v", st.Size(), st.Mode(), st.ModTime())
	}
	if sa.Wcc.Before == nil || sa.Wcc.After == nil || sa.Wcc.After.Size != 10 {
		t.Fatalf("SETATTR wcc %+v", sa.Wcc)
	}
	stale := nfs3.Time{Sec: 1}
	sa, err = c.Setattr(ctx, &nfs3.SetattrArgs{Object: f, New: nfs3.Sattr{Size: u64p(0)}, Guard: &stale})
	want(t, "SETATTR with stale guard", sa.Status, err, nfs3.ErrNotSync)
	guard := sa.Wcc.After.Ctime
	sa, err = c.Setattr(ctx, &nfs3.SetattrArgs{Object: f, New: nfs3.Sattr{Size: u64p(0)}, Guard: &guard})
	ok(t, "SETATTR with current guard", sa.Status, err)

	// LOOKUP, ACCESS
	if got := e.lookup(e.root, "file"); !bytes.Equal(got, f) {
		t.Fatal("LOOKUP handle differs from CREATE's")
	}
	lk, err := c.Lookup(ctx, e.root, "nope")
	want(t, "LOOKUP missing", lk.Status, err, nfs3.ErrNoEnt)
	if lk.DirAttr == nil {
		t.Fatal("LOOKUP failure without dir attributes")
	}
	if got := e.lookup(e.root, ".."); !bytes.Equal(got, e.root) {
		t.Fatal(".. of the export root is not the root")
	}
	ac, err := c.Access(ctx, f, 0x3f)
	ok(t, "ACCESS", ac.Status, err)
	if ac.Access != nfs3.AccessRead|nfs3.AccessModify|nfs3.AccessExtend {
		t.Fatalf("ACCESS on 0600 file as root = %#x", ac.Access)
	}

	// MKDIR, SYMLINK, READLINK, MKNOD, LINK, RENAME
	md, err := c.Mkdir(ctx, e.root, "dir", nfs3.Sattr{Mode: u32p(0o750)})
	ok(t, "MKDIR", md.Status, err)
	if fi, _ := os.Stat(e.path("dir")); fi == nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("MKDIR made %v", fi)
	}
	md, err = c.Mkdir(ctx, e.root, "dir", nfs3.Sattr{})
	want(t, "MKDIR existing", md.Status, err, nfs3.ErrExist)
	sl, err := c.Symlink(ctx, e.root, "link", "../outside/target", nfs3.Sattr{})
	ok(t, "SYMLINK", sl.Status, err)
	rl, err := c.Readlink(ctx, sl.Object)
	ok(t, "READLINK", rl.Status, err)
	if rl.Path != "../outside/target" {
		t.Fatalf("READLINK = %q", rl.Path)
	}
	rl, err = c.Readlink(ctx, f)
	want(t, "READLINK of a file", rl.Status, err, nfs3.ErrInval)
	mk, err := c.Mknod(ctx, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "fifo"}, Type: nfs3.TypeFifo, Attr: nfs3.Sattr{Mode: u32p(0o600)}})
	ok(t, "MKNOD fifo", mk.Status, err)
	if fi, _ := os.Lstat(e.path("fifo")); fi == nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("MKNOD made %v", fi)
	}
	mk, err = c.Mknod(ctx, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "chr"}, Type: nfs3.TypeChr, Spec: nfs3.SpecData{Major: 1, Minor: 3}})
	ok(t, "MKNOD chr", mk.Status, err)
	if mk.Attr.Type != nfs3.TypeChr || mk.Attr.Rdev != (nfs3.SpecData{Major: 1, Minor: 3}) {
		t.Fatalf("MKNOD chr attrs %+v", mk.Attr)
	}
	mk, err = c.Mknod(ctx, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "reg"}, Type: nfs3.TypeReg})
	want(t, "MKNOD regular", mk.Status, err, nfs3.ErrBadType)
	md2 := e.lookup(e.root, "dir")
	ln, err := c.Link(ctx, f, md2, "hard")
	ok(t, "LINK", ln.Status, err)
	if ln.Attr == nil || ln.Attr.Nlink != 2 || ln.LinkWcc.After == nil {
		t.Fatalf("LINK result %+v", ln)
	}
	rn, err := c.Rename(ctx, e.root, "file", md2, "moved")
	ok(t, "RENAME", rn.Status, err)
	if _, err := os.Stat(e.path("dir/moved")); err != nil {
		t.Fatal("RENAME target missing:", err)
	}
	if rn.FromWcc.After == nil || rn.ToWcc.After == nil {
		t.Fatal("RENAME without wcc")
	}
	// The handle survives the rename (it is not path-based).
	if ga, err := c.Getattr(ctx, f); err != nil || ga.Status != nfs3.OK {
		t.Fatalf("GETATTR after RENAME: %v %v", err, ga.Status)
	}

	// READDIR, READDIRPLUS
	for _, plus := range []bool{false, true} {
		ents, err := c.ReadDirAll(ctx, md2, plus)
		if err != nil {
			t.Fatalf("readdir plus=%v: %v", plus, err)
		}
		names := map[string]bool{}
		for _, en := range ents {
			names[en.Name] = true
			if plus && en.Name == "moved" && (en.Attr == nil || !bytes.Equal(en.Handle, f)) {
				t.Fatalf("READDIRPLUS entry %+v", en)
			}
		}
		if len(ents) != 4 || !names["."] || !names[".."] || !names["moved"] || !names["hard"] {
			t.Fatalf("readdir plus=%v: %v", plus, names)
		}
	}
	rdr, err := c.Readdir(ctx, &nfs3.ReaddirArgs{Dir: md2, Count: 10})
	want(t, "READDIR with a tiny count", rdr.Status, err, nfs3.ErrTooSmall)

	// REMOVE, RMDIR
	rm, err := c.Rmdir(ctx, e.root, "dir")
	want(t, "RMDIR non-empty", rm.Status, err, nfs3.ErrNotEmpty)
	rm, err = c.Remove(ctx, md2, "hard")
	ok(t, "REMOVE", rm.Status, err)
	rm, err = c.Remove(ctx, md2, "moved")
	ok(t, "REMOVE", rm.Status, err)
	if rm.Wcc.Before == nil || rm.Wcc.After == nil {
		t.Fatal("REMOVE without wcc")
	}
	ga, err = c.Getattr(ctx, f)
	want(t, "GETATTR of a removed file", ga.Status, err, nfs3.ErrStale)
	rm, err = c.Remove(ctx, e.root, "dir")
	want(t, "REMOVE of a directory", rm.Status, err, nfs3.ErrIsDir)
	rm, err = c.Rmdir(ctx, e.root, "dir")
	ok(t, "RMDIR", rm.Status, err)
	rm, err = c.Rmdir(ctx, e.root, "link")
	want(t, "RMDIR of a symlink", rm.Status, err, nfs3.ErrNotDir)

	// FSSTAT, FSINFO, PATHCONF
	fs, err := c.Fsstat(ctx, e.root)
	ok(t, "FSSTAT", fs.Status, err)
	var sfs syscall.Statfs_t
	syscall.Statfs(e.dir, &sfs)
	if fs.TBytes != sfs.Blocks*uint64(sfs.Bsize) || fs.TFiles != sfs.Files {
		t.Fatalf("FSSTAT %+v vs statfs %+v", fs, sfs)
	}
	fi, err := c.Fsinfo(ctx, e.root)
	ok(t, "FSINFO", fi.Status, err)
	if fi.RtMax < 1<<20 || fi.WtMax < 1<<20 || fi.MaxFileSize < 1<<40 {
		t.Fatalf("FSINFO %+v", fi)
	}
	pc, err := c.Pathconf(ctx, e.root)
	ok(t, "PATHCONF", pc.Status, err)
	if pc.NameMax != 255 || !pc.NoTrunc || !pc.CasePreserving {
		t.Fatalf("PATHCONF %+v", pc)
	}
}

// TestCreateModes covers UNCHECKED, GUARDED and EXCLUSIVE create.
func TestCreateModes(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	c := e.nfs
	args := func(mode nfs3.CreateMode, name string) *nfs3.CreateArgs {
		return &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: name}, Mode: mode, Attr: nfs3.Sattr{Mode: u32p(0o644)}}
	}
	r, err := c.Create(ctx, args(nfs3.Guarded, "g"))
	ok(t, "GUARDED", r.Status, err)
	if r.Object == nil || r.Attr == nil || r.DirWcc.Before == nil || r.DirWcc.After == nil {
		t.Fatalf("CREATE result %+v", r)
	}
	r, err = c.Create(ctx, args(nfs3.Guarded, "g"))
	want(t, "GUARDED again", r.Status, err, nfs3.ErrExist)
	os.WriteFile(e.path("u"), []byte("content"), 0o644)
	a := args(nfs3.Unchecked, "u")
	a.Attr.Size = u64p(0)
	r, err = c.Create(ctx, a)
	ok(t, "UNCHECKED over an existing file", r.Status, err)
	if fi, _ := os.Stat(e.path("u")); fi.Size() != 0 {
		t.Fatal("UNCHECKED with size 0 did not truncate")
	}
	x := &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "x"}, Mode: nfs3.Exclusive, Verf: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	r1, err := c.Create(ctx, x)
	ok(t, "EXCLUSIVE", r1.Status, err)
	r2, err := c.Create(ctx, x)
	ok(t, "EXCLUSIVE replay (new xid, same verifier)", r2.Status, err)
	if !bytes.Equal(r1.Object, r2.Object) {
		t.Fatal("EXCLUSIVE replay returned another handle")
	}
	x.Verf[0] = 9
	r3, err := c.Create(ctx, x)
	want(t, "EXCLUSIVE with another verifier", r3.Status, err, nfs3.ErrExist)
	r, err = c.Create(ctx, args(nfs3.Guarded, "."))
	want(t, "CREATE .", r.Status, err, nfs3.ErrExist)
	r, err = c.Create(ctx, args(nfs3.Guarded, string(bytes.Repeat([]byte("n"), 256))))
	want(t, "CREATE long name", r.Status, err, nfs3.ErrNameTooLong)
	r, err = c.Create(ctx, args(nfs3.Guarded, "a/b"))
	want(t, "CREATE name with slash", r.Status, err, nfs3.ErrAcces)
}
