package tests

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"

	"snfs/nfs3"
)

// TestRestart: handles stay valid across a server restart; the verifier changes.
func TestRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	f := e.create(e.nfs, e.root, "f", 0o644)
	w, err := e.nfs.Write(ctx, f, 0, []byte("before"), nfs3.Unstable)
	ok(t, "WRITE", w.Status, err)
	oldRoot := e.root
	e.restart()
	if !bytes.Equal(oldRoot, e.root) {
		t.Fatal("root handle changed across restart")
	}
	ga, err := e.nfs.Getattr(ctx, f)
	ok(t, "GETATTR with a handle from before the restart", ga.Status, err)
	cm, err := e.nfs.Commit(ctx, f, 0, 0)
	ok(t, "COMMIT", cm.Status, err)
	if cm.Verf == w.Verf {
		t.Fatal("write verifier did not change across restart")
	}
	rd, err := e.nfs.Read(ctx, f, 0, 100)
	ok(t, "READ", rd.Status, err)
	if string(rd.Data) != "before" {
		t.Fatalf("READ = %q", rd.Data)
	}
}

// TestDRCReplay resends REMOVE, RENAME and EXCLUSIVE CREATE with the same xid after
// the reply: the reply is identical, not NOENT or EXIST.
func TestDRCReplay(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	c := e.nfs
	e.create(c, e.root, "victim", 0o644)
	e.create(c, e.root, "from", 0o644)
	type call struct {
		name string
		proc uint32
		args interface{ Encode(w *xdrWriter) }
		res  func() interface{ Decode(r *xdrReader) error }
	}
	calls := []call{
		{"REMOVE", nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: e.root, Name: "victim"}, func() interface{ Decode(*xdrReader) error } { return &nfs3.WccRes{} }},
		{"RENAME", nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: e.root, Name: "from"}, To: nfs3.DirOpArgs{Dir: e.root, Name: "to"}},
			func() interface{ Decode(*xdrReader) error } { return &nfs3.RenameRes{} }},
		{"CREATE EXCLUSIVE", nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "excl"}, Mode: nfs3.Exclusive, Verf: [8]byte{7}},
			func() interface{ Decode(*xdrReader) error } { return &nfs3.CreateRes{} }},
		{"MKDIR", nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "d"}}, func() interface{ Decode(*xdrReader) error } { return &nfs3.CreateRes{} }},
	}
	for _, cl := range calls {
		xid := c.NextXID()
		first, second := cl.res(), cl.res()
		if err := c.CallXID(ctx, xid, cl.proc, cl.args, first); err != nil {
			t.Fatal(err)
		}
		if err := c.CallXID(ctx, xid, cl.proc, cl.args, second); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("%s replay differs:\n%+v\n%+v", cl.name, first, second)
		}
		if st := reflect.ValueOf(first).Elem().FieldByName("Status").Interface().(nfs3.Status); st != nfs3.OK {
			t.Fatalf("%s: %v", cl.name, st)
		}
		// A new xid is a new request: now it fails as it should.
		third := cl.res()
		c.Call(ctx, cl.proc, cl.args, third)
		if st := reflect.ValueOf(third).Elem().FieldByName("Status").Interface().(nfs3.Status); st == nfs3.OK && cl.name != "CREATE EXCLUSIVE" {
			t.Fatalf("%s with a new xid succeeded again", cl.name)
		}
	}
}

// TestLargeSparseFile writes beyond 4 GiB and reads back, hole included.
func TestLargeSparseFile(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	f := e.create(e.nfs, e.root, "sparse", 0o644)
	const off = 5<<30 + 123
	w, err := e.nfs.Write(ctx, f, off, []byte("far away"), nfs3.FileSync)
	ok(t, "WRITE at 5 GiB", w.Status, err)
	ga, err := e.nfs.Getattr(ctx, f)
	ok(t, "GETATTR", ga.Status, err)
	if ga.Attr.Size != off+8 || ga.Attr.Used > 1<<20 {
		t.Fatalf("size %d used %d", ga.Attr.Size, ga.Attr.Used)
	}
	rd, err := e.nfs.Read(ctx, f, off, 100)
	ok(t, "READ at 5 GiB", rd.Status, err)
	if string(rd.Data) != "far away" || !rd.EOF {
		t.Fatalf("READ = %q eof %v", rd.Data, rd.EOF)
	}
	rd, err = e.nfs.Read(ctx, f, 4<<30, 4096)
	ok(t, "READ in the hole", rd.Status, err)
	if len(rd.Data) != 4096 || !bytes.Equal(rd.Data, make([]byte, 4096)) {
		t.Fatal("hole does not read as zeros")
	}
	fi, _ := os.Stat(e.path("sparse"))
	if fi.Size() != off+8 {
		t.Fatalf("local size %d", fi.Size())
	}
}

// TestBigDirectory pages through 100,000 entries with small READDIR and READDIRPLUS
// replies while other entries are being added, and sees each original name exactly once.
func TestBigDirectory(t *testing.T) {
	t.Parallel()
	requireLong(t)
	requireRoot(t)
	if testing.Short() {
		t.Skip("-short")
	}
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("big"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 100000
	for i := 0; i < n; i++ {
		f, err := os.Create(e.path(fmt.Sprintf("big/file-%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	dir := e.lookup(e.root, "big")
	for _, plus := range []bool{false, true} {
		t.Run(fmt.Sprintf("plus=%v", plus), func(t *testing.T) {
			seen := make(map[string]int, n)
			var cookie uint64
			var verf [8]byte
			var wg sync.WaitGroup
			stop := make(chan struct{})
			wg.Add(1)
			go func() { // add entries while the listing runs
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("added-%v-%d", plus, i)
					if _, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: nfs3.Unchecked}); err != nil {
						return
					}
				}
			}()
			calls := 0
			for {
				var res *nfs3.ReaddirRes
				var err error
				if plus {
					res, err = e.nfs.Readdirplus(ctx, &nfs3.ReaddirplusArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, DirCount: 4096, MaxCount: 32768})
				} else {
					res, err = e.nfs.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, Count: 8192})
				}
				ok(t, "READDIR", res.Status, err)
				calls++
				for _, en := range res.Entries {
					seen[en.Name]++
					if plus && en.Name != ".." && en.Handle == nil {
						t.Fatalf("READDIRPLUS entry %q without handle", en.Name)
					}
				}
				if res.EOF {
					break
				}
				if len(res.Entries) == 0 {
					t.Fatal("empty page without eof")
				}
				cookie, verf = res.Entries[len(res.Entries)-1].Cookie, res.CookieVerf
				if calls > 100000 {
					t.Fatal("listing does not end")
				}
			}
			close(stop)
			wg.Wait()
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("file-%06d", i)
				if seen[name] != 1 {
					t.Fatalf("%s seen %d times (in %d calls)", name, seen[name], calls)
				}
			}
			for name, k := range seen {
				if k != 1 {
					t.Fatalf("%s seen %d times", name, k)
				}
			}
			t.Logf("%d entries in %d calls", len(seen), calls)
		})
	}
}

// TestReaddirplusAfterReplace: a name replaced by a new file (ext4 may even reuse
// the inode number, with a new generation) gets the new file's handle from
// READDIRPLUS, never the old one's.
func TestReaddirplusAfterReplace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	os.WriteFile(e.path("x"), []byte("old"), 0o644)
	handleOf := func() nfs3.FH {
		ents, err := e.nfs.ReadDirAll(ctx, e.root, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range ents {
			if en.Name == "x" {
				return en.Handle
			}
		}
		t.Fatal("x not listed")
		return nil
	}
	for i := 0; i < 20; i++ {
		old := handleOf()
		os.Remove(e.path("x"))
		os.WriteFile(e.path("x"), []byte(fmt.Sprint("new", i)), 0o644)
		fresh := handleOf()
		rd, err := e.nfs.Read(ctx, fresh, 0, 100)
		ok(t, "READ through the listed handle", rd.Status, err)
		if string(rd.Data) != fmt.Sprint("new", i) {
			t.Fatalf("listed handle reads %q", rd.Data)
		}
		if ga, err := e.nfs.Getattr(ctx, old); err != nil || ga.Status != nfs3.ErrStale {
			t.Fatalf("old handle after replace: %v %v", err, ga.Status)
		}
	}
}
