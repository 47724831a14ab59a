package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// FuzzHandlers feeds arbitrary arguments to the real NFSv3 and MOUNT procedures on a
// real export: the first byte picks the procedure. No input may panic a handler (a
// panic would be answered SYSTEM_ERR by sunrpc, but it is still a bug). Seeds carry
// valid handles so that mutation reaches past the handle check.
func FuzzHandlers(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root (the server switches identities)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "snfs-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	state, _ := os.MkdirTemp("/var/tmp", "snfs-fuzz-state-")
	f.Cleanup(func() { os.RemoveAll(state) })
	os.WriteFile(dir+"/file", []byte("content"), 0o644)
	os.Mkdir(dir+"/sub", 0o755)
	os.Symlink("file", dir+"/link")
	opts, _ := ParseOptions(DefaultOptions, "rw,no_root_squash,async")
	s, err := New(Config{StateDir: state, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Exports: []ExportConfig{{Path: dir, Clients: []ClientRule{{Spec: "*", Opts: opts}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(context.Background()) })
	root := s.RootHandle(dir)
	n, _ := s.store.Resolve(root)
	fileFH, _, _ := s.store.Lookup(n, "file")
	subFH, _, _ := s.store.Lookup(n, "sub")
	n.Release()
	nfsProcs := s.nfsProgram().Versions[nfs3.Version]
	mntProcs := s.mountProgram().Versions[mount3.Version]
	mode := uint32(0o644)
	seeds := []struct {
		proc int
		args xdr.Encoder
	}{
		{nfs3.ProcGetattr, &nfs3.FHArgs{FH: fileFH}},
		{nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fileFH, New: nfs3.Sattr{Mode: &mode}}},
		{nfs3.ProcLookup, &nfs3.DirOpArgs{Dir: root, Name: "file"}},
		{nfs3.ProcRead, &nfs3.ReadArgs{File: fileFH, Count: 100}},
		{nfs3.ProcWrite, &nfs3.WriteArgs{File: fileFH, Offset: 3, Count: 2, Stable: nfs3.FileSync, Data: []byte("xy")}},
		{nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: subFH, Name: "c"}, Mode: nfs3.Exclusive}},
		{nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: subFH, Name: "d"}}},
		{nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: subFH, Name: "s"}, Path: "../x"}},
		{nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: subFH, Name: "p"}, Type: nfs3.TypeFifo}},
		{nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: subFH, Name: "c"}},
		{nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: subFH, Name: "d"}, To: nfs3.DirOpArgs{Dir: subFH, Name: "e"}}},
		{nfs3.ProcLink, &nfs3.LinkArgs{File: fileFH, Link: nfs3.DirOpArgs{Dir: subFH, Name: "h"}}},
		{nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 512, MaxCount: 4096}},
		{nfs3.ProcCommit, &nfs3.CommitArgs{File: fileFH}},
		{nfs3.NumProcs + mount3.ProcMnt, &mount3.DirPath{Path: dir + "/sub"}},
	}
	for _, sd := range seeds {
		var w xdr.Writer
		sd.args.Encode(&w)
		f.Add(append([]byte{byte(sd.proc)}, w.Bytes()...))
	}
	call := &sunrpc.Call{Auth: sunrpc.AuthSysParams{Flavor: sunrpc.AuthSys}, Network: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 700}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		sel := int(b[0]) % (nfs3.NumProcs + mount3.NumProcs)
		proc := &sunrpc.Proc{}
		if sel < nfs3.NumProcs {
			proc = &nfsProcs[sel]
		} else {
			proc = &mntProcs[sel-nfs3.NumProcs]
		}
		if proc.Inline != nil {
			proc.Inline(b[1:])
		}
		c := *call
		var w xdr.Writer
		err := proc.Handler(context.Background(), &c, xdr.NewReader(b[1:]), &w)
		if err != nil && err != sunrpc.ErrGarbageArgs {
			t.Fatalf("%s: %v", proc.Name, err)
		}
	})
}
