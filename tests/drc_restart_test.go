package tests

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"snfs/nfs3"
)

// replayCall is one non-idempotent call sent twice with the same xid.
type replayCall struct {
	name string
	proc uint32
	args interface{ Encode(w *xdrWriter) }
	res  func() interface{ Decode(r *xdrReader) error }
	// again is the status the same call gets with a new xid once the first
	// took effect (a second execution).
	again nfs3.Status
}

func statusOfRes(res any) nfs3.Status {
	return reflect.ValueOf(res).Elem().FieldByName("Status").Interface().(nfs3.Status)
}

// replayCalls prepares the export for one call of every non-idempotent kind
// whose second execution answers differently from the first.
func replayCalls(t *testing.T, e *env) []replayCall {
	t.Helper()
	c := e.nfs
	e.create(c, e.root, "victim", 0o644)
	e.create(c, e.root, "from", 0o644)
	linked := e.create(c, e.root, "linked", 0o644)
	guarded := e.create(c, e.root, "guarded", 0o644)
	ga, err := c.Getattr(ctx, guarded)
	ok(t, "GETATTR", ga.Status, err)
	ctime := ga.Attr.Ctime
	mk, err := c.Mkdir(ctx, e.root, "gone", nfs3.Sattr{})
	ok(t, "MKDIR gone", mk.Status, err)
	wcc := func() interface{ Decode(*xdrReader) error } { return &nfs3.WccRes{} }
	created := func() interface{ Decode(*xdrReader) error } { return &nfs3.CreateRes{} }
	return []replayCall{
		{"REMOVE", nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: e.root, Name: "victim"}, wcc, nfs3.ErrNoEnt},
		{"RENAME", nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: e.root, Name: "from"}, To: nfs3.DirOpArgs{Dir: e.root, Name: "to"}},
			func() interface{ Decode(*xdrReader) error } { return &nfs3.RenameRes{} }, nfs3.ErrNoEnt},
		{"CREATE EXCLUSIVE", nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "excl"}, Mode: nfs3.Exclusive, Verf: [8]byte{7}},
			created, nfs3.ErrExist},
		{"CREATE GUARDED", nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "guard"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: u32p(0o600)}},
			created, nfs3.ErrExist},
		{"MKDIR", nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "d"}}, created, nfs3.ErrExist},
		{"SYMLINK", nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "sl"}, Path: "victim"}, created, nfs3.ErrExist},
		{"RMDIR", nfs3.ProcRmdir, &nfs3.DirOpArgs{Dir: e.root, Name: "gone"}, wcc, nfs3.ErrNoEnt},
		{"LINK", nfs3.ProcLink, &nfs3.LinkArgs{File: linked, Link: nfs3.DirOpArgs{Dir: e.root, Name: "link2"}},
			func() interface{ Decode(*xdrReader) error } { return &nfs3.LinkRes{} }, nfs3.ErrExist},
		{"SETATTR guarded", nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: guarded, New: nfs3.Sattr{Mode: u32p(0o640)}, Guard: &ctime},
			wcc, nfs3.ErrNotSync},
	}
}

// copyDir copies the tree of src into a new directory: the state directory
// as a server killed at that moment leaves it (what its writes put in the
// page cache, whether flushed or not).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := diskTempDir(t, "snfs-state-copy-")
	err := filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case de.IsDir():
			return os.MkdirAll(to, 0o700)
		case !de.Type().IsRegular():
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestDRCReplayAfterRestart: a non-idempotent call retransmitted with the same
// xid after the server restarted (its first reply lost with the connection)
// gets the reply of the first execution, not the answer of a second one
// (ENOENT for a REMOVE or RENAME that happened, EEXIST for a create, NOT_SYNC
// for a guarded SETATTR). The exclusive CREATE's file is written before the
// restart, as a client does after creating it, which changes the times that
// hold its verifier: only the saved reply can answer the retransmission.
//
// "kill" restarts on a copy of the state directory taken right after the
// replies arrived, as a server killed then leaves it: the replies were saved
// before they were sent. "shutdown" restarts cleanly; "async-shutdown" too,
// on an async export, whose replies are sent before they are saved: the
// shutdown saves them.
func TestDRCReplayAfterRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, how := range []string{"kill", "shutdown", "async-shutdown"} {
		t.Run(how, func(t *testing.T) {
			opts := "rw,no_root_squash"
			if how == "async-shutdown" {
				opts += ",async"
			}
			e := newEnv(t, opts)
			calls := replayCalls(t, e)
			xids := make([]uint32, len(calls))
			firsts := make([]any, len(calls))
			for i, cl := range calls {
				xids[i] = e.nfs.NextXID()
				first := cl.res()
				if err := e.nfs.CallXID(ctx, xids[i], cl.proc, cl.args, first); err != nil {
					t.Fatal(err)
				}
				if st := statusOfRes(first); st != nfs3.OK {
					t.Fatalf("%s: %v", cl.name, st)
				}
				firsts[i] = first
			}
			excl := e.lookup(e.root, "excl")
			w, err := e.nfs.Write(ctx, excl, 0, []byte("data"), nfs3.FileSync)
			ok(t, "WRITE excl", w.Status, err)
			if how == "kill" {
				e.cfg.StateDir = copyDir(t, e.stateDir)
			}
			e.restart()
			for i, cl := range calls {
				again := cl.res()
				if err := e.nfs.CallXID(ctx, xids[i], cl.proc, cl.args, again); err != nil {
					t.Fatal(err)
				}
				if st := statusOfRes(again); st != nfs3.OK {
					t.Errorf("%s retransmitted after the restart: %v, want the first reply (OK)", cl.name, st)
				} else if !reflect.DeepEqual(firsts[i], again) {
					t.Errorf("%s retransmitted after the restart: the reply differs:\n%+v\n%+v", cl.name, firsts[i], again)
				}
			}
			// A new xid is a new call: executed again, it fails as it should.
			for _, cl := range calls {
				res := cl.res()
				if err := e.nfs.Call(ctx, cl.proc, cl.args, res); err != nil {
					t.Fatal(err)
				}
				if st := statusOfRes(res); st != cl.again {
					t.Errorf("%s with a new xid: %v, want %v", cl.name, st, cl.again)
				}
			}
		})
	}
}

// TestDRCSavedBounded: the saved replies are bounded by count; the oldest go
// first, and a retransmission of a call whose reply was dropped is executed
// again.
func TestDRCSavedBounded(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.SavedReplies = 3
	e.restart()
	const n = 8
	xids := make([]uint32, n)
	names := make([]string, n)
	for i := range n {
		names[i] = "f" + string(rune('a'+i))
		e.create(e.nfs, e.root, names[i], 0o644)
	}
	for i := range n {
		xids[i] = e.nfs.NextXID()
		var res nfs3.WccRes
		if err := e.nfs.CallXID(ctx, xids[i], nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: e.root, Name: names[i]}, &res); err != nil {
			t.Fatal(err)
		}
		ok(t, "REMOVE "+names[i], res.Status, nil)
	}
	e.restart()
	for i := range n {
		var res nfs3.WccRes
		if err := e.nfs.CallXID(ctx, xids[i], nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: e.root, Name: names[i]}, &res); err != nil {
			t.Fatal(err)
		}
		want := nfs3.OK // one of the 3 newest: replayed
		if i < n-3 {
			want = nfs3.ErrNoEnt // dropped: executed again
		}
		if res.Status != want {
			t.Errorf("REMOVE %s (%d of %d) retransmitted after the restart: %v, want %v", names[i], i+1, n, res.Status, want)
		}
	}
}
