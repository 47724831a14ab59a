package tests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/nfs3"
	"snfs/server"

	"golang.org/x/sys/unix"
)

// TestMountSNFSPermitsKeptNamesRecalled: under a directory's write-back
// permit the kernel keeps the names the mount gives it (cachemgr
// permitnames.go); when another client's change recalls the permit, they are
// dropped before the recall is answered. A file made locally and one renamed
// by a plain NFSv3 client (whose REMOVE and RENAME wait for the recall) are
// gone from the holder's view the moment those calls return, and the new
// name is there. Without the drop the kernel kept the old names for the
// lease's rest: stat found a removed file.
func TestMountSNFSPermitsKeptNamesRecalled(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-kept-names", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y"} {
		if err := os.WriteFile(a.path("d/"+n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 2 {
		t.Fatalf("%d changes made locally; want 2 (the creates, under d's permit)", got)
	}
	// The kernel now has both names (and keeps them: the stats below come
	// from its dentries).
	for _, n := range []string{"x", "y"} {
		if _, err := os.Stat(a.path("d/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	D := e.lookup(e.root, "d")
	if r, err := e.nfs.Remove(ctx, D, "x"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain REMOVE d/x: %v %v", r, err)
	}
	if r, err := e.nfs.Rename(ctx, D, "y", D, "z"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain RENAME d/y d/z: %v %v", r, err)
	}
	for _, n := range []string{"x", "y"} {
		if _, err := os.Stat(a.path("d/" + n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("A's stat of d/%s after another client removed it: %v; want ENOENT", n, err)
		}
	}
	if got, err := os.ReadFile(a.path("d/z")); err != nil || string(got) != "y" {
		t.Errorf("A reads d/z: %q, %v", got, err)
	}
}

// TestMountSNFSPermitsKeptNameMovedOut: a name the kernel keeps under a
// permit, renamed by this mount into a cached directory whose names it does
// not keep (no permit: the server's bound of one per client), is not kept
// there: the kernel moves the name with its lifetime, so the mount drops
// every kept name after such a rename. A plain client's rename of the moved
// file (which breaks e's promise, needing no name of the kernel's dropped)
// is then seen at once (a removal would be seen anyway: the kernel looks a
// name up again when its object is gone, ESTALE).
func TestMountSNFSPermitsKeptNameMovedOut(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Permits.MaxPerClient = 1 })
	for _, d := range []string{"d", "e"} {
		if err := os.MkdirAll(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-kept-moved", "")
	for _, d := range []string{"d", "e"} {
		if _, err := os.ReadDir(a.path(d)); err != nil {
			t.Fatal(err)
		}
	}
	// A local change takes d's permit (the one this client may hold); then
	// x's name is kept.
	if err := os.WriteFile(a.path("d/y"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 1 {
		t.Fatalf("%d changes made locally; want 1 (under d's permit)", got)
	}
	if _, err := os.Stat(a.path("d/x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("d/x"), a.path("e/x")); err != nil {
		t.Fatal(err)
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 1 {
		t.Fatalf("%d changes made locally; want 1 (the rename into e, without its permit, through the server)", got)
	}
	if _, err := os.Stat(a.path("e/x")); err != nil {
		t.Fatal(err)
	}
	E := e.lookup(e.root, "e")
	if r, err := e.nfs.Rename(ctx, E, "x", E, "z"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain RENAME e/x e/z: %v %v", r, err)
	}
	if _, err := os.Stat(a.path("e/x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("A's stat of e/x after another client renamed it: %v; want ENOENT", err)
	}
	if got, err := os.ReadFile(a.path("e/z")); err != nil || string(got) != "x" {
		t.Errorf("A reads e/z: %q, %v", got, err)
	}
}

// TestMountSNFSPermitsKeptProvisionalNames: the names of files made locally
// under a directory's write-back permit are kept by the kernel like the
// directory's other names (cachemgr permitnames.go): a path walk to one asks
// the mount nothing, before the files reach the server and after (the
// directory's fsync reintegrates them), where each keeps the inode number
// it was made with and reads back what was written. Before, every path walk
// to such a name asked the mount (a lookup a component, twice in a
// create-close-unlink loop).
func TestMountSNFSPermitsKeptProvisionalNames(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, data := range []bool{false, true} {
		t.Run(fmt.Sprintf("permit-data=%v", data), func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
				t.Fatal(err)
			}
			a := newSNFSMountWith(t, e, "kept-prov", "", snfsmount.Config{Name: "kept-prov", WriteBackDelay: time.Hour,
				Permits: true, PermitData: data}, fusefs.Options{})
			if !a.v.CanNotifyNames() {
				t.Skip("the kernel cannot drop the names it keeps (FUSE_NOTIFY_INC_EPOCH, Linux 6.16): no name is kept")
			}
			if err := os.WriteFile(a.path("d/first"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			sn := cachemgr.SNFS(a.v)
			local := cachemgr.StatsOf(a.v).LocalChanges.Load()
			const n = 10
			inos := map[string]uint64{}
			for k := range n {
				p := a.path(fmt.Sprintf("d/f%d", k))
				if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
					t.Fatal(err)
				}
				inos[p] = inoOf(t, p)
			}
			if got := cachemgr.StatsOf(a.v).LocalChanges.Load() - local; got != n {
				t.Fatalf("%d changes made locally; want %d (the creates, under d's permit)", got, n)
			}
			lookups := func() uint64 { return sn.NameCacheCount("hit") + sn.NameCacheCount("miss") }
			// From d's descriptor: the walk is the name's alone (a walk from
			// the root looks d up in it, which is no permit's).
			df, err := os.Open(a.path("d"))
			if err != nil {
				t.Fatal(err)
			}
			defer df.Close()
			walk := func(when string) {
				t.Helper()
				before := lookups()
				for p, ino := range inos {
					var st unix.Stat_t
					if err := unix.Fstatat(int(df.Fd()), filepath.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
						t.Fatalf("%s: %s: %v", when, p, err)
					}
					if st.Ino != ino {
						t.Errorf("%s: st_ino of %s %d, made as %d", when, p, st.Ino, ino)
					}
				}
				if got := lookups() - before; got != 0 {
					t.Errorf("%s: %d path walks to the %d names made reached the mount; want none", when, got, n)
				}
			}
			walk("before the reintegration")
			syncDir(t, a.path("d"))
			for k := range n {
				if _, err := os.Stat(e.path(fmt.Sprintf("d/f%d", k))); err != nil {
					t.Fatalf("the server's d/f%d after d's fsync: %v", k, err)
				}
			}
			walk("after the reintegration")
			for p := range inos {
				if got, err := os.ReadFile(p); err != nil || string(got) != p {
					t.Errorf("the mount reads %s: %q, %v", p, got, err)
				}
			}
		})
	}
}
