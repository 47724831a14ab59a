package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"snfs/state"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/xdr"
)

// The extended-attribute procedures (docs/protocol.md, GETXATTR to
// REMOVEXATTR; server/getxattr.go and the others): RFC 8276's semantics on
// the backing file's own user.* attributes.

func getX(t *testing.T, c *client.NFS, fh nfs3.FH, name string) ([]byte, nfs3.Status) {
	t.Helper()
	res, err := c.GetXattr(ctx, fh, name)
	if err != nil {
		t.Fatalf("GETXATTR %s: %v", name, err)
	}
	return res.Value, res.Status
}

func setX(t *testing.T, c *client.NFS, fh nfs3.FH, name, value string, opt snfs1.SetXattrOption) (*snfs1.SetXattrRes, nfs3.Status) {
	t.Helper()
	res, err := c.SetXattr(ctx, fh, name, []byte(value), opt)
	if err != nil {
		t.Fatalf("SETXATTR %s: %v", name, err)
	}
	return res, res.Status
}

func rmX(t *testing.T, c *client.NFS, fh nfs3.FH, name string) nfs3.Status {
	t.Helper()
	res, err := c.RemoveXattr(ctx, fh, name)
	if err != nil {
		t.Fatalf("REMOVEXATTR %s: %v", name, err)
	}
	return res.Status
}

// listAllX lists fh's names, maxCount bytes per call, following cookies.
func listAllX(t *testing.T, c *client.NFS, fh nfs3.FH, maxCount uint32) []string {
	t.Helper()
	var names []string
	cookie := uint64(0)
	for calls := 0; ; calls++ {
		if calls > 1000 {
			t.Fatal("LISTXATTRS never reached eof")
		}
		res, err := c.ListXattrs(ctx, fh, cookie, maxCount)
		ok(t, "LISTXATTRS", res.Status, err)
		size := 0
		for _, n := range res.Names {
			size += snfs1.XattrNameSize(n)
		}
		if size > int(maxCount) {
			t.Fatalf("LISTXATTRS of at most %d bytes returned %d", maxCount, size)
		}
		names = append(names, res.Names...)
		if res.EOF {
			return names
		}
		if len(res.Names) == 0 {
			t.Fatal("LISTXATTRS returned no names and no eof")
		}
		cookie = res.Cookie
	}
}

// TestSNFSXattr: set, get, list, remove of user.* attributes through the
// protocol, each seen on the exported file; CREATE and REPLACE; the other
// namespaces; sizes; symlinks; permissions as the kernel's for a local user.
func TestSNFSXattr(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	u := e.as(1000, 1000)
	fh := e.create(u, e.root, "f", 0o644)
	before, err := os.Stat(e.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a ctime tick

	res, st := setX(t, u, fh, "user.color", "red", snfs1.XattrEither)
	ok(t, "SETXATTR user.color", st, nil)
	if a := res.Wcc.After; a == nil || res.Wcc.Before == nil || nfsTimeOf(a.Ctime) <= before.Sys().(*syscall.Stat_t).Ctim.Nano() ||
		nfsTimeOf(res.Wcc.Before.Ctime) != before.Sys().(*syscall.Stat_t).Ctim.Nano() {
		t.Fatalf("SETXATTR's wcc_data %+v: ctime did not move from %v", res.Wcc, before.Sys().(*syscall.Stat_t).Ctim)
	}
	buf := make([]byte, 64)
	k, err := unix.Getxattr(e.path("f"), "user.color", buf)
	if err != nil || string(buf[:k]) != "red" {
		t.Fatalf("the exported file's user.color: %q, %v", buf[:k], err)
	}
	if v, st := getX(t, u, fh, "user.color"); st != nfs3.OK || string(v) != "red" {
		t.Fatalf("GETXATTR user.color: %q %v", v, st)
	}
	// A local process's attribute is served.
	if err := unix.Setxattr(e.path("f"), "user.local", []byte("from the server"), 0); err != nil {
		t.Fatal(err)
	}
	if v, st := getX(t, u, fh, "user.local"); st != nfs3.OK || string(v) != "from the server" {
		t.Fatalf("GETXATTR user.local: %q %v", v, st)
	}

	_, st = setX(t, u, fh, "user.color", "blue", snfs1.XattrCreate)
	want(t, "SETXATTR CREATE of an existing name", st, nil, nfs3.ErrExist)
	_, st = setX(t, u, fh, "user.none", "x", snfs1.XattrReplace)
	want(t, "SETXATTR REPLACE of a missing name", st, nil, snfs1.ErrNoXattr)
	_, st = setX(t, u, fh, "user.color", "blue", snfs1.XattrReplace)
	ok(t, "SETXATTR REPLACE", st, nil)
	_, st = setX(t, u, fh, "user.new", "", snfs1.XattrCreate)
	ok(t, "SETXATTR CREATE of an empty value", st, nil)
	if v, st := getX(t, u, fh, "user.new"); st != nfs3.OK || len(v) != 0 {
		t.Fatalf("GETXATTR of an empty value: %q %v", v, st)
	}
	_, st = getX(t, u, fh, "user.none")
	want(t, "GETXATTR of a missing name", st, nil, snfs1.ErrNoXattr)
	want(t, "REMOVEXATTR of a missing name", rmX(t, u, fh, "user.none"), nil, snfs1.ErrNoXattr)

	// Only the user namespace.
	for _, name := range []string{"trusted.x", "security.selinux", "system.posix_acl_access", "color", ""} {
		_, st = setX(t, e.nfs, fh, name, "v", snfs1.XattrEither)
		want(t, "SETXATTR "+name, st, nil, nfs3.ErrNotSupp)
		_, st = getX(t, e.nfs, fh, name)
		want(t, "GETXATTR "+name, st, nil, nfs3.ErrNotSupp)
		want(t, "REMOVEXATTR "+name, rmX(t, e.nfs, fh, name), nil, nfs3.ErrNotSupp)
	}

	// Sizes: past the protocol's limit the client does not send; below it,
	// what the backing file system allows (ext4: a value must fit in one
	// block, else ENOSPC), as for a local process.
	_, st = setX(t, u, fh, "user.big", string(make([]byte, snfs1.XattrSizeMax+1)), snfs1.XattrEither)
	want(t, "SETXATTR past SNFS_XATTR_SIZEMAX", st, nil, snfs1.ErrXattr2Big)
	for _, size := range []int{4000, 8000, snfs1.XattrSizeMax} {
		val := bytes.Repeat([]byte{'v'}, size)
		local := filepath.Join(e.dir, fmt.Sprintf("local%d", size))
		if err := os.WriteFile(local, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		lerr := unix.Setxattr(local, "user.big", val, 0)
		res, err := u.SetXattr(ctx, fh, "user.big", val, snfs1.XattrEither)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case lerr == nil && res.Status == nfs3.OK:
			if v, st := getX(t, u, fh, "user.big"); st != nfs3.OK || !bytes.Equal(v, val) {
				t.Fatalf("GETXATTR of %d bytes: %d bytes, %v", size, len(v), st)
			}
		case errors.Is(lerr, unix.ENOSPC) && res.Status == nfs3.ErrNoSpc,
			errors.Is(lerr, unix.E2BIG) && res.Status == snfs1.ErrXattr2Big:
		default:
			t.Fatalf("a value of %d bytes: locally %v, through the protocol %v", size, lerr, res.Status)
		}
	}
	rmX(t, u, fh, "user.big")

	// Permission: another user may read and list, not change; without
	// read permission, only list.
	other := e.as(2000, 2000)
	if v, st := getX(t, other, fh, "user.color"); st != nfs3.OK || string(v) != "blue" {
		t.Fatalf("GETXATTR by another user of a 0644 file: %q %v", v, st)
	}
	_, st = setX(t, other, fh, "user.color", "green", snfs1.XattrEither)
	want(t, "SETXATTR by another user of a 0644 file", st, nil, nfs3.ErrAcces)
	want(t, "REMOVEXATTR by another user of a 0644 file", rmX(t, other, fh, "user.color"), nil, nfs3.ErrAcces)
	if err := os.Chmod(e.path("f"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, st = getX(t, other, fh, "user.color")
	want(t, "GETXATTR by another user of a 0600 file", st, nil, nfs3.ErrAcces)
	if got := listAllX(t, other, fh, snfs1.XattrListMax); !slices.Equal(got, []string{"user.color", "user.local", "user.new"}) {
		t.Fatalf("LISTXATTRS by another user of a 0600 file: %q", got)
	}

	// Directories hold them; symlinks cannot (EPERM to set, none to get).
	if _, st := setX(t, u, e.root, "user.dir", "d", snfs1.XattrEither); st != nfs3.OK {
		t.Fatalf("SETXATTR of a directory: %v", st)
	}
	if v, st := getX(t, u, e.root, "user.dir"); st != nfs3.OK || string(v) != "d" {
		t.Fatalf("GETXATTR of a directory: %q %v", v, st)
	}
	sl, err := u.Symlink(ctx, e.root, "link", "f", nfs3.Sattr{})
	ok(t, "SYMLINK", sl.Status, err)
	_, st = setX(t, u, sl.Object, "user.x", "v", snfs1.XattrEither)
	want(t, "SETXATTR of a symlink", st, nil, nfs3.ErrPerm)
	_, st = getX(t, u, sl.Object, "user.color")
	want(t, "GETXATTR of a symlink", st, nil, snfs1.ErrNoXattr)

	ok(t, "REMOVEXATTR", rmX(t, u, fh, "user.color"), nil)
	_, st = getX(t, u, fh, "user.color")
	want(t, "GETXATTR after REMOVEXATTR", st, nil, snfs1.ErrNoXattr)
	if _, err := unix.Getxattr(e.path("f"), "user.color", buf); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("the exported file's user.color after REMOVEXATTR: %v", err)
	}
}

func nfsTimeOf(t nfs3.Time) int64 { return int64(t.Sec)*1e9 + int64(t.Nsec) }

// TestSNFSListXattrsPaging: LISTXATTRS returns every name once, sorted,
// whatever the page size, and answers TOOSMALL and BAD_COOKIE.
func TestSNFSListXattrsPaging(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	var want []string
	for i := range 60 {
		name := fmt.Sprintf("user.attr-%03d-%s", i, bytes.Repeat([]byte{'x'}, i%17))
		want = append(want, name)
		if err := unix.Setxattr(e.path("f"), name, []byte{byte(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Another namespace on the backing file is not listed.
	if err := unix.Setxattr(e.path("f"), "trusted.hidden", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	for _, maxCount := range []uint32{40, 64, 100, 1000, snfs1.XattrListMax, 1 << 30} {
		if got := listAllX(t, e.nfs, fh, maxCount); !slices.Equal(got, want) {
			t.Fatalf("maxcount %d: listed %q, want %q", maxCount, got, want)
		}
	}
	res, err := e.nfs.ListXattrs(ctx, fh, 0, 8)
	want2 := nfs3.ErrTooSmall
	if err != nil || res.Status != want2 {
		t.Fatalf("LISTXATTRS of 8 bytes: %v %v, want %v", res, err, want2)
	}
	res, err = e.nfs.ListXattrs(ctx, fh, uint64(len(want)+1), 1000)
	if err != nil || res.Status != nfs3.ErrBadCookie {
		t.Fatalf("LISTXATTRS past the end: %v %v", res, err)
	}
	res, err = e.nfs.ListXattrs(ctx, fh, uint64(len(want)), 1000)
	if err != nil || res.Status != nfs3.OK || !res.EOF || len(res.Names) != 0 {
		t.Fatalf("LISTXATTRS at the end: %+v %v", res, err)
	}
}

// TestSNFSXattrCallsBack: a SETXATTR or REMOVEXATTR of a file a protocol
// client caches calls it back (invalidate) before the change is answered,
// as a WRITE would: its cached attributes, extended ones included, are gone.
// And as after a WRITE, the file is not cached by anyone while the changer's
// plain hold lasts: no OPEN answered before the change is applied caches
// the attributes from before it.
func TestSNFSXattrCallsBack(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	b := newProtoClient(t, e, "reader-b")
	for _, change := range []string{"SETXATTR", "REMOVEXATTR"} {
		fh := e.create(e.nfs, e.root, change, 0o644)
		if err := unix.Setxattr(e.path(change), "user.tag", []byte("before"), 0); err != nil {
			t.Fatal(err)
		}
		b.openCaching(fh, state.Read)
		n := len(b.got())
		if change == "SETXATTR" {
			_, st := setX(t, e.nfs, fh, "user.tag", "v", snfs1.XattrEither)
			ok(t, change, st, nil)
		} else {
			ok(t, change, rmX(t, e.nfs, fh, "user.tag"), nil)
		}
		got := b.got()
		if len(got) <= n || !got[n].Mode.Invalidates() || !bytes.Equal(got[n].File, fh) {
			t.Fatalf("%s of a file B caches: B's callbacks %+v", change, got[n:])
		}
		b.close(fh, state.Read, false)
		res, err := b.open(fh, state.Read)
		ok(t, "OPEN after "+change, res.Status, err)
		if res.CacheEnabled {
			t.Fatalf("OPEN right after %s by a client that holds the file as a plain writer: caching granted", change)
		}
		b.close(fh, state.Read, false)
	}
}

// TestSNFSXattrReplayAfterRestart: SETXATTR (CREATE) and REMOVEXATTR
// retransmitted with the same xid after a server killed and restarted get the
// first execution's reply, saved before it was sent, not a second
// execution's EXIST or NOXATTR.
func TestSNFSXattrReplayAfterRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	_, st := setX(t, e.nfs, fh, "user.gone", "v", snfs1.XattrEither)
	ok(t, "SETXATTR user.gone", st, nil)
	p := e.nfs.Program(snfs1.Program, snfs1.Version)
	calls := []struct {
		name  string
		proc  uint32
		args  xdr.Encoder
		again nfs3.Status
	}{
		{"SETXATTR CREATE", snfs1.ProcSetXattr, &snfs1.SetXattrArgs{File: fh, Option: snfs1.XattrCreate, Name: "user.new", Value: []byte("v")}, nfs3.ErrExist},
		{"REMOVEXATTR", snfs1.ProcRemoveXattr, &snfs1.RemoveXattrArgs{File: fh, Name: "user.gone"}, snfs1.ErrNoXattr},
	}
	xids := make([]uint32, len(calls))
	for i, c := range calls {
		xids[i] = p.NextXID()
		var res snfs1.XattrChangeRes
		if err := p.CallXID(ctx, xids[i], c.proc, c.args, &res); err != nil {
			t.Fatal(err)
		}
		ok(t, c.name, res.Status, nil)
	}
	e.cfg.StateDir = copyDir(t, e.stateDir)
	e.restart()
	p = e.nfs.Program(snfs1.Program, snfs1.Version)
	for i, c := range calls {
		var res snfs1.XattrChangeRes
		if err := p.CallXID(ctx, xids[i], c.proc, c.args, &res); err != nil {
			t.Fatal(err)
		}
		want(t, c.name+" retransmitted after the restart", res.Status, nil, nfs3.OK)
		res = snfs1.XattrChangeRes{}
		if err := p.Call(ctx, c.proc, c.args, &res); err != nil {
			t.Fatal(err)
		}
		want(t, c.name+" with a new xid", res.Status, nil, c.again)
	}
}

// TestSNFSXattrReadOnlyExport: on a read-only export the attributes are
// read, never changed (ROFS).
func TestSNFSXattrReadOnlyExport(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "ro,no_root_squash")
	if err := os.WriteFile(e.path("f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(e.path("f"), "user.color", []byte("red"), 0); err != nil {
		t.Fatal(err)
	}
	fh := e.lookup(e.root, "f")
	if v, st := getX(t, e.nfs, fh, "user.color"); st != nfs3.OK || string(v) != "red" {
		t.Fatalf("GETXATTR on a read-only export: %q %v", v, st)
	}
	_, st := setX(t, e.nfs, fh, "user.color", "blue", snfs1.XattrEither)
	want(t, "SETXATTR on a read-only export", st, nil, nfs3.ErrROFS)
	want(t, "REMOVEXATTR on a read-only export", rmX(t, e.nfs, fh, "user.color"), nil, nfs3.ErrROFS)
}
