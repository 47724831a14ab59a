package server

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
)

// TestInlineHints: which calls the NFS table lets run on the connection's reader.
// Namespace changes only on an async export (elsewhere they flush the directory);
// WRITE only when UNSTABLE (stable writes wait for their gathered flush).
func TestInlineHints(t *testing.T) {
	dirs := map[string]string{}
	var exports []ExportConfig
	for _, o := range []string{"async", "sync"} {
		d := t.TempDir()
		dirs[o] = d
		opts, err := ParseOptions(DefaultOptions, "rw,"+o)
		if err != nil {
			t.Fatal(err)
		}
		exports = append(exports, ExportConfig{Path: d, Clients: []ClientRule{{Spec: "*", Opts: opts}}})
	}
	s, err := New(Config{StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Exports: exports})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	async, sync := s.RootHandle(dirs["async"]), s.RootHandle(dirs["sync"])
	procs := s.nfsProgram().Versions[nfs3.Version]
	enc := func(e xdr.Encoder) []byte {
		var w xdr.Writer
		e.Encode(&w)
		return w.Bytes()
	}
	forged := append(nfs3.FH{}, async...)
	forged[len(forged)-1] ^= 1 // bad MAC: still only a hint, the handler rejects it
	for _, tc := range []struct {
		name string
		proc int
		args []byte
		want bool
	}{
		{"GETATTR", nfs3.ProcGetattr, enc(&nfs3.FHArgs{FH: sync}), true},
		{"READ", nfs3.ProcRead, enc(&nfs3.ReadArgs{File: sync, Count: 1}), true},
		{"CREATE async", nfs3.ProcCreate, enc(&nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: async, Name: "a"}}), true},
		{"CREATE sync", nfs3.ProcCreate, enc(&nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: sync, Name: "a"}}), false},
		{"REMOVE async", nfs3.ProcRemove, enc(&nfs3.DirOpArgs{Dir: async, Name: "a"}), true},
		{"RENAME sync", nfs3.ProcRename, enc(&nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: sync, Name: "a"}, To: nfs3.DirOpArgs{Dir: async, Name: "b"}}), false},
		{"SETATTR sync", nfs3.ProcSetattr, enc(&nfs3.SetattrArgs{Object: sync}), false},
		{"MKDIR forged", nfs3.ProcMkdir, enc(&nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: forged, Name: "d"}}), true},
		{"MKDIR garbage", nfs3.ProcMkdir, []byte{0, 0, 1, 0}, false},
		{"WRITE unstable", nfs3.ProcWrite, enc(&nfs3.WriteArgs{File: sync, Count: 1, Stable: nfs3.Unstable, Data: []byte("x")}), true},
		{"WRITE data_sync", nfs3.ProcWrite, enc(&nfs3.WriteArgs{File: async, Count: 1, Stable: nfs3.DataSync, Data: []byte("x")}), false},
		{"WRITE file_sync", nfs3.ProcWrite, enc(&nfs3.WriteArgs{File: async, Count: 1, Stable: nfs3.FileSync, Data: []byte("x")}), false},
		{"WRITE truncated", nfs3.ProcWrite, enc(&nfs3.FHArgs{FH: async}), false},
		{"COMMIT", nfs3.ProcCommit, enc(&nfs3.CommitArgs{File: async}), false},
	} {
		p := procs[tc.proc]
		if got := p.Inline != nil && p.Inline(tc.args); got != tc.want {
			t.Errorf("%s: inline %v, want %v", tc.name, got, tc.want)
		}
	}
}
