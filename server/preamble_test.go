package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"snfs/nfs3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// preambleEnv is a server with four exports on disk: rw (sync, no_root_squash), ro,
// async (rw) and closed (no rule admits 127.0.0.1), each holding a file "file", a
// directory "sub" and a symbolic link "link".
type preambleEnv struct {
	s     *Server
	procs []sunrpc.Proc
	dirs  map[string]string
}

func newPreambleEnv(t *testing.T) *preambleEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the server switches identities)")
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-preamble-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	env := &preambleEnv{dirs: map[string]string{}}
	var exports []ExportConfig
	for _, ex := range []struct{ name, client, opts string }{
		{"rw", "*", "rw,no_root_squash"},
		{"ro", "*", "ro,no_root_squash"},
		{"async", "*", "rw,no_root_squash,async"},
		{"closed", "10.0.0.0/8", "rw,no_root_squash"},
	} {
		d := filepath.Join(base, ex.name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "file"), []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("file", filepath.Join(d, "link")); err != nil {
			t.Fatal(err)
		}
		n, err := ParseClient(ex.client)
		if err != nil {
			t.Fatal(err)
		}
		o, err := ParseOptions(DefaultOptions, ex.opts)
		if err != nil {
			t.Fatal(err)
		}
		env.dirs[ex.name] = d
		exports = append(exports, ExportConfig{Path: d, Clients: []ClientRule{{Spec: ex.client, Net: n, Opts: o}}})
	}
	env.s, err = New(Config{StateDir: filepath.Join(base, "state"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Exports: exports})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.s.Shutdown(context.Background()) })
	env.procs = env.s.nfsProgram().Versions[nfs3.Version]
	return env
}

// root is the root handle of the named export.
func (e *preambleEnv) root(export string) nfs3.FH { return e.s.RootHandle(e.dirs[export]) }

// lookup is the handle of name in the named export's root.
func (e *preambleEnv) lookup(t *testing.T, export, name string) nfs3.FH {
	t.Helper()
	n, err := e.s.store.Resolve(e.root(export))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release()
	fh, _, err := e.s.store.Lookup(n, name)
	if err != nil {
		t.Fatal(err)
	}
	return fh
}

// call runs procedure proc on args as root from 127.0.0.1:700 and returns the
// encoded result.
func (e *preambleEnv) call(t *testing.T, proc int, args xdr.Encoder) []byte {
	t.Helper()
	var in xdr.Writer
	args.Encode(&in)
	c := &sunrpc.Call{Auth: sunrpc.AuthSysParams{Flavor: sunrpc.AuthSys}, Network: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}}
	var out xdr.Writer
	if err := e.procs[proc].Handler(context.Background(), c, xdr.NewReader(in.Bytes()), &out); err != nil {
		t.Fatalf("%s: %v", nfs3.ProcNames[proc], err)
	}
	return out.Bytes()
}

// argsWith are arguments for every procedure but NULL whose (first) handle is fh;
// dir is a good directory handle for the second handle of RENAME and LINK.
func argsWith(proc int, fh, dir nfs3.FH) xdr.Encoder {
	mode := uint32(0o644)
	switch proc {
	case nfs3.ProcGetattr, nfs3.ProcReadlink, nfs3.ProcFsstat, nfs3.ProcFsinfo, nfs3.ProcPathconf:
		return &nfs3.FHArgs{FH: fh}
	case nfs3.ProcSetattr:
		return &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Mode: &mode}}
	case nfs3.ProcLookup:
		return &nfs3.DirOpArgs{Dir: fh, Name: "file"}
	case nfs3.ProcAccess:
		return &nfs3.AccessArgs{Object: fh, Access: 0x3f}
	case nfs3.ProcRead:
		return &nfs3.ReadArgs{File: fh, Count: 100}
	case nfs3.ProcWrite:
		return &nfs3.WriteArgs{File: fh, Count: 2, Stable: nfs3.Unstable, Data: []byte("xy")}
	case nfs3.ProcCreate:
		return &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "new"}, Mode: nfs3.Unchecked,
			Attr: nfs3.Sattr{Mode: &mode, Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}}}
	case nfs3.ProcMkdir:
		return &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "newdir"}, Attr: nfs3.Sattr{Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}}}
	case nfs3.ProcSymlink:
		return &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "newlink"}, Path: "file"}
	case nfs3.ProcMknod:
		return &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: "fifo"}, Type: nfs3.TypeFifo}
	case nfs3.ProcRemove:
		return &nfs3.DirOpArgs{Dir: fh, Name: "new"}
	case nfs3.ProcRmdir:
		return &nfs3.DirOpArgs{Dir: fh, Name: "newdir"}
	case nfs3.ProcRename:
		return &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fh, Name: "newlink"}, To: nfs3.DirOpArgs{Dir: dir, Name: "renamed"}}
	case nfs3.ProcLink:
		return &nfs3.LinkArgs{File: fh, Link: nfs3.DirOpArgs{Dir: dir, Name: "hard"}}
	case nfs3.ProcReaddir:
		return &nfs3.ReaddirArgs{Dir: fh, Count: 4096}
	case nfs3.ProcReaddirplus:
		return &nfs3.ReaddirplusArgs{Dir: fh, DirCount: 4096, MaxCount: 8192}
	case nfs3.ProcCommit:
		return &nfs3.CommitArgs{File: fh}
	}
	panic("no arguments for procedure " + nfs3.ProcNames[proc])
}

// resultOf is an empty result of procedure proc.
func resultOf(proc int) nfs3.Result {
	switch proc {
	case nfs3.ProcGetattr:
		return &nfs3.GetattrRes{}
	case nfs3.ProcSetattr, nfs3.ProcRemove, nfs3.ProcRmdir:
		return &nfs3.WccRes{}
	case nfs3.ProcLookup:
		return &nfs3.LookupRes{}
	case nfs3.ProcAccess:
		return &nfs3.AccessRes{}
	case nfs3.ProcReadlink:
		return &nfs3.ReadlinkRes{}
	case nfs3.ProcRead:
		return &nfs3.ReadRes{}
	case nfs3.ProcWrite:
		return &nfs3.WriteRes{}
	case nfs3.ProcCreate, nfs3.ProcMkdir, nfs3.ProcSymlink, nfs3.ProcMknod:
		return &nfs3.CreateRes{}
	case nfs3.ProcRename:
		return &nfs3.RenameRes{}
	case nfs3.ProcLink:
		return &nfs3.LinkRes{}
	case nfs3.ProcReaddir:
		return &nfs3.ReaddirRes{}
	case nfs3.ProcReaddirplus:
		return &nfs3.ReaddirRes{Plus: true}
	case nfs3.ProcFsstat:
		return &nfs3.FsstatRes{}
	case nfs3.ProcFsinfo:
		return &nfs3.FsinfoRes{}
	case nfs3.ProcPathconf:
		return &nfs3.PathconfRes{}
	case nfs3.ProcCommit:
		return &nfs3.CommitRes{}
	}
	panic("no result for procedure " + nfs3.ProcNames[proc])
}

// modifies lists the procedures whose (first) handle must be on a writable export.
var modifies = map[int]bool{nfs3.ProcSetattr: true, nfs3.ProcWrite: true, nfs3.ProcCreate: true,
	nfs3.ProcMkdir: true, nfs3.ProcSymlink: true, nfs3.ProcMknod: true, nfs3.ProcRemove: true,
	nfs3.ProcRmdir: true, nfs3.ProcRename: true}

// TestPreambleFailures: when the table's preamble cannot resolve a call's handle
// (malformed, forged, stale, an export the client may not use, a read-only export
// for a procedure that modifies), every procedure answers the right status in its
// failure result with nothing else set: no attributes, no wcc data. Argument checks
// the table makes first (RMDIR ".", MKNOD of a regular file) win over a bad handle.
func TestPreambleFailures(t *testing.T) {
	e := newPreambleEnv(t)
	dir := e.root("rw")
	forged := append(nfs3.FH{}, e.lookup(t, "rw", "file")...)
	forged[len(forged)-1] ^= 1
	if err := os.WriteFile(filepath.Join(e.dirs["rw"], "gone-soon"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gone := e.lookup(t, "rw", "gone-soon")
	if err := os.Remove(filepath.Join(e.dirs["rw"], "gone-soon")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fh   nfs3.FH
		want nfs3.Status
		only map[int]bool // nil: every procedure
	}{
		{"malformed", nfs3.FH{1, 2, 3}, nfs3.ErrBadHandle, nil},
		{"empty", nfs3.FH{}, nfs3.ErrBadHandle, nil},
		{"forged", forged, nfs3.ErrBadHandle, nil},
		{"stale", gone, nfs3.ErrStale, nil},
		{"export closed to the client", e.root("closed"), nfs3.ErrAcces, nil},
		{"read-only export", e.root("ro"), nfs3.ErrROFS, modifies},
	} {
		for proc := nfs3.ProcGetattr; proc < nfs3.NumProcs; proc++ {
			if tc.only != nil && !tc.only[proc] {
				continue
			}
			name := tc.name + "/" + nfs3.ProcNames[proc]
			got := e.call(t, proc, argsWith(proc, tc.fh, dir))
			want := resultOf(proc)
			want.SetStatus(tc.want)
			var w xdr.Writer
			want.Encode(&w)
			if !bytes.Equal(got, w.Bytes()) {
				res := resultOf(proc)
				res.Decode(xdr.NewReader(got))
				t.Errorf("%s: reply %+v, want %+v", name, res, want)
			}
		}
	}

	for _, tc := range []struct {
		name string
		proc int
		args xdr.Encoder
		want nfs3.Status
	}{
		{"RMDIR . with a bad handle", nfs3.ProcRmdir, &nfs3.DirOpArgs{Dir: nfs3.FH{1}, Name: "."}, nfs3.ErrInval},
		{"RMDIR .. with a bad handle", nfs3.ProcRmdir, &nfs3.DirOpArgs{Dir: nfs3.FH{1}, Name: ".."}, nfs3.ErrNotEmpty},
		{"MKNOD of a regular file with a bad handle", nfs3.ProcMknod,
			&nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: nfs3.FH{1}, Name: "f"}, Type: nfs3.TypeReg}, nfs3.ErrBadType},
	} {
		got := e.call(t, tc.proc, tc.args)
		want := resultOf(tc.proc)
		want.SetStatus(tc.want)
		var w xdr.Writer
		want.Encode(&w)
		if !bytes.Equal(got, w.Bytes()) {
			t.Errorf("%s: reply %x, want %x", tc.name, got, w.Bytes())
		}
	}

	// The second handle of RENAME and LINK is the handler's: its failure still
	// reports what the first one resolved to.
	var rn nfs3.RenameRes
	rn.Decode(xdr.NewReader(e.call(t, nfs3.ProcRename,
		&nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: dir, Name: "file"}, To: nfs3.DirOpArgs{Dir: forged, Name: "x"}})))
	if rn.Status != nfs3.ErrBadHandle || rn.FromWcc.Before == nil || rn.FromWcc.After == nil || rn.ToWcc.Before != nil {
		t.Errorf("RENAME to a forged directory: %+v", rn)
	}
	var ln nfs3.LinkRes
	ln.Decode(xdr.NewReader(e.call(t, nfs3.ProcLink,
		&nfs3.LinkArgs{File: e.lookup(t, "rw", "file"), Link: nfs3.DirOpArgs{Dir: e.root("ro"), Name: "x"}})))
	if ln.Status != nfs3.ErrROFS || ln.Attr == nil || ln.LinkWcc.Before != nil {
		t.Errorf("LINK into a read-only export: %+v", ln)
	}
}

// TestHandleResolvedOnce: a call checks each handle it carries once (the store's
// MAC-check counter): the table's preamble resolves the first, RENAME and LINK
// their second, and an object CREATE, MKDIR, SYMLINK or MKNOD makes is resolved
// once for both its attributes and its flush (on a sync export; an async export
// does not flush it, and resolves it only to set attributes).
func TestHandleResolvedOnce(t *testing.T) {
	e := newPreambleEnv(t)
	for _, export := range []string{"rw", "async"} {
		root, file, link := e.root(export), e.lookup(t, export, "file"), e.lookup(t, export, "link")
		// CREATE and MKDIR here set attributes on the object they make (and a sync
		// export flushes it): the directory's handle and the new one, once each.
		// SYMLINK and MKNOD set none, so only a sync export resolves the new object.
		made, madePlain := uint64(2), uint64(2)
		if export == "async" {
			madePlain = 1
		}
		for _, tc := range []struct {
			proc   int
			fh     nfs3.FH
			checks uint64
		}{
			{nfs3.ProcGetattr, root, 1},
			{nfs3.ProcSetattr, file, 1},
			{nfs3.ProcLookup, root, 1},
			{nfs3.ProcAccess, file, 1},
			{nfs3.ProcReadlink, link, 1},
			{nfs3.ProcRead, file, 1},
			{nfs3.ProcWrite, file, 1},
			{nfs3.ProcCreate, root, made},
			{nfs3.ProcMkdir, root, made},
			{nfs3.ProcSymlink, root, madePlain},
			{nfs3.ProcMknod, root, madePlain},
			{nfs3.ProcRename, root, 2},
			{nfs3.ProcLink, file, 2},
			{nfs3.ProcRemove, root, 1},
			{nfs3.ProcRmdir, root, 1},
			{nfs3.ProcReaddir, root, 1},
			{nfs3.ProcReaddirplus, root, 1},
			{nfs3.ProcFsstat, root, 1},
			{nfs3.ProcFsinfo, root, 1},
			{nfs3.ProcPathconf, root, 1},
			{nfs3.ProcCommit, file, 1},
		} {
			name := export + "/" + nfs3.ProcNames[tc.proc]
			before := e.s.store.HandleChecks()
			reply := e.call(t, tc.proc, argsWith(tc.proc, tc.fh, root))
			checks := e.s.store.HandleChecks() - before
			if st := nfs3.Status(binary.BigEndian.Uint32(reply)); st != nfs3.OK {
				t.Errorf("%s: %v", name, st)
			}
			if checks != tc.checks {
				t.Errorf("%s: %d handle checks, want %d", name, checks, tc.checks)
			}
		}
	}
}
