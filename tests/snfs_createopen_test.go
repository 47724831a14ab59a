package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// CREATE_OPEN (docs/protocol.md 4.21) against an in-process server, through
// raw protocol clients: what it makes, what it opens, its reply cache class,
// the grace period, and the other clients' holds and promises it breaks.

// createOpenXID sends CREATE_OPEN of name in dir with xid (0: a new one).
func (p *protoClient) createOpenXID(xid uint32, dir nfs3.FH, name string, how nfs3.CreateMode, verf byte, size *uint64) *snfs1.CreateOpenRes {
	p.t.Helper()
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	mode := uint32(0o644)
	args := &snfs1.CreateOpenArgs{Client: id, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: how}}
	if how == nfs3.Exclusive {
		args.Create.Verf[0] = verf
	} else {
		args.Create.Attr = nfs3.Sattr{Mode: &mode, Size: size}
	}
	if xid == 0 {
		xid = p.rpc.NextXID()
	}
	var res snfs1.CreateOpenRes
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.rpc.CallXID(cx, xid, snfs1.ProcCreateOpen, args, &res); err != nil {
		p.t.Fatalf("CREATE_OPEN %s: %v", name, err)
	}
	return &res
}

func (p *protoClient) createOpen(dir nfs3.FH, name string, how nfs3.CreateMode) *snfs1.CreateOpenRes {
	p.t.Helper()
	return p.createOpenXID(0, dir, name, how, 0, nil)
}

// probed waits until p's callback path is verified (an OPEN of a scratch
// file grants caching), so that the CREATE_OPENs that follow may cache.
func (p *protoClient) probed(e *env, scratch string) {
	p.t.Helper()
	if err := os.WriteFile(e.path(scratch), nil, 0o666); err != nil {
		p.t.Fatal(err)
	}
	fh := e.lookup(e.root, scratch)
	p.openCaching(fh, state.Read)
	p.close(fh, state.Read, false)
}

// TestSNFSCreateOpen: CREATE_OPEN makes the file and opens it for writing
// with caching (another client's OPEN then calls the creator back); GUARDED
// on an existing name fails EXIST and opens nothing; EXCLUSIVE succeeds again
// for the same verifier, on the same file, and fails for another; a
// retransmission with the same xid gets the first reply and opens nothing
// more, while a new xid is a new call.
func TestSNFSCreateOpen(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := newProtoClient(t, e, "createopen-a")
	b := newProtoClient(t, e, "createopen-b")
	a.probed(e, "scratch-a")
	b.probed(e, "scratch-b")

	t.Run("creates and opens", func(t *testing.T) {
		res := a.createOpen(e.root, "new", nfs3.Guarded)
		ok(t, "CREATE_OPEN", res.Status, nil)
		ok(t, "CREATE_OPEN's open", res.Open.Status, nil)
		if st, err := os.Stat(e.path("new")); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
			t.Fatalf("the file made: %v %v", st, err)
		}
		if !bytes.Equal(res.File, e.lookup(e.root, "new")) || res.Attr == nil || res.DirWcc.After == nil {
			t.Fatalf("result %+v", res)
		}
		if !res.Open.CacheEnabled || res.Open.CacheVersion == 0 {
			t.Fatalf("open %+v: want caching and a version", res.Open.OpenOK)
		}
		if res.Open.Attr == nil || res.Open.Attr.FileID != res.Attr.FileID {
			t.Fatalf("open's attributes %+v", res.Open.Attr)
		}
		// b's OPEN returns after the callbacks it needs: a, the caching
		// writer, was called back if (and only if) its open was counted.
		b.openOrFatal(t, res.File, state.Read)
		if got := a.got(); len(got) != 1 || !bytes.Equal(got[0].File, res.File) {
			t.Fatalf("a's callbacks after b's OPEN: %+v; want one for the file a created and opened", got)
		}
		b.close(res.File, state.Read, false)
		a.close(res.File, state.Write, false)
	})

	t.Run("GUARDED on an existing name", func(t *testing.T) {
		if err := os.WriteFile(e.path("there"), []byte("x"), 0o666); err != nil {
			t.Fatal(err)
		}
		res := a.createOpen(e.root, "there", nfs3.Guarded)
		if res.Status != nfs3.ErrExist {
			t.Fatalf("CREATE_OPEN GUARDED of an existing name: %v; want NFS3ERR_EXIST", res.Status)
		}
		if res.DirWcc.After == nil {
			t.Error("the failure carries no directory attributes")
		}
		a.got()
		fh := e.lookup(e.root, "there")
		if w := b.openCaching(fh, state.Write); !w.CacheEnabled {
			t.Fatal("b's OPEN for writing")
		}
		for _, cb := range a.got() {
			if bytes.Equal(cb.File, fh) {
				t.Fatalf("a called back (%v): its failed CREATE_OPEN opened the file", cb.Mode)
			}
		}
		b.close(fh, state.Write, false)
	})

	t.Run("EXCLUSIVE", func(t *testing.T) {
		first := a.createOpenXID(0, e.root, "excl", nfs3.Exclusive, 7, nil)
		ok(t, "CREATE_OPEN EXCLUSIVE", first.Status, nil)
		ok(t, "its open", first.Open.Status, nil)
		again := a.createOpenXID(0, e.root, "excl", nfs3.Exclusive, 7, nil)
		ok(t, "CREATE_OPEN EXCLUSIVE again, same verifier", again.Status, nil)
		ok(t, "its open", again.Open.Status, nil)
		if !bytes.Equal(first.File, again.File) {
			t.Fatal("the same verifier's second CREATE_OPEN answered another file")
		}
		if other := a.createOpenXID(0, e.root, "excl", nfs3.Exclusive, 8, nil); other.Status != nfs3.ErrExist {
			t.Fatalf("another verifier: %v; want NFS3ERR_EXIST", other.Status)
		}
		a.close(first.File, state.Write, false)
		a.close(first.File, state.Write, false)
	})

	t.Run("retransmission", func(t *testing.T) {
		xid := a.rpc.NextXID()
		first := a.createOpenXID(xid, e.root, "dup", nfs3.Guarded, 0, nil)
		ok(t, "CREATE_OPEN", first.Status, nil)
		ok(t, "its open", first.Open.Status, nil)
		again := a.createOpenXID(xid, e.root, "dup", nfs3.Guarded, 0, nil)
		if again.Status != nfs3.OK || !bytes.Equal(again.File, first.File) || again.Open.Status != first.Open.Status ||
			again.Open.CacheVersion != first.Open.CacheVersion || again.Open.CacheEnabled != first.Open.CacheEnabled {
			t.Fatalf("retransmission answered %+v; want the first reply %+v", again, first)
		}
		if res := a.createOpen(e.root, "dup", nfs3.Guarded); res.Status != nfs3.ErrExist {
			t.Fatalf("a new xid: %v; want NFS3ERR_EXIST", res.Status)
		}
		// One open counted: after a's one CLOSE, b's OPEN for writing finds
		// the file not write-shared (it may cache).
		a.close(first.File, state.Write, false)
		if w := b.openOrFatal(t, first.File, state.Write); !w.CacheEnabled {
			t.Fatal("b's OPEN after a's CLOSE may not cache: the retransmission counted a second open")
		}
		b.close(first.File, state.Write, false)
	})
}

// TestSNFSCreateOpenHeld: an UNCHECKED CREATE_OPEN of a file another client
// holds. With a size, the holder is called back before the file is cut (as
// for CREATE), and the open makes the file write-shared; when the holder's
// answer takes longer than the open's bound, the create stands and the open
// part alone is JUKEBOX.
func TestSNFSCreateOpenHeld(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	h := newProtoClient(t, e, "createopen-holder")
	c := newProtoClient(t, e, "createopen-creator")
	h.probed(e, "scratch-h")
	c.probed(e, "scratch-c")
	if err := os.WriteFile(e.path("held"), []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	fh := e.lookup(e.root, "held")
	h.openCaching(fh, state.Write)

	zero := uint64(0)
	res := c.createOpenXID(0, e.root, "held", nfs3.Unchecked, 0, &zero)
	ok(t, "CREATE_OPEN UNCHECKED of a held file", res.Status, nil)
	ok(t, "its open", res.Open.Status, nil)
	if got := h.got(); len(got) == 0 {
		t.Fatal("the holder was not called back before the reply")
	}
	if res.Open.CacheEnabled {
		t.Error("the open of a write-shared file may cache")
	}
	if res.Attr == nil || res.Attr.Size != 0 {
		t.Errorf("attributes after the create %+v; want size 0", res.Attr)
	}
	c.close(fh, state.Write, false)
	h.close(fh, state.Write, false)
	t.Run("open waits too long", func(t *testing.T) {
		// Another file: the truncation above counts as a plain access of
		// "held" for a while, which keeps it from being cached.
		if err := os.WriteFile(e.path("held2"), []byte("data"), 0o666); err != nil {
			t.Fatal(err)
		}
		fh := e.lookup(e.root, "held2")
		h.openCaching(fh, state.Write)
		release := make(chan struct{})
		h.setAnswer(func(*snfs1.CallbackArgs) state.Outcome {
			<-release
			return state.OK
		})
		defer close(release)
		res := c.createOpen(e.root, "held2", nfs3.Unchecked)
		ok(t, "CREATE_OPEN UNCHECKED", res.Status, nil)
		if res.Open.Status != nfs3.ErrJukebox || len(res.File) == 0 {
			t.Fatalf("open part %v (file %x); want NFS3ERR_JUKEBOX with the file", res.Open.Status, res.File)
		}
	})
}

// TestSNFSCreateOpenGrace: during the grace period CREATE_OPEN is JUKEBOX and
// makes nothing, and the JUKEBOX is not cached: the same xid sent again after
// the grace period is executed.
func TestSNFSCreateOpenGrace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	late := dialGrace(t, e, "createopen-late", nil)
	late.holding.Store(true) // the grace period lasts until it reclaims
	restartGrace(e, time.Hour)
	p := newProtoClient(t, e, "createopen-grace")
	xid := p.rpc.NextXID()
	if res := p.createOpenXID(xid, e.root, "g", nfs3.Guarded, 0, nil); res.Status != nfs3.ErrJukebox {
		t.Fatalf("CREATE_OPEN during grace: %v; want NFS3ERR_JUKEBOX", res.Status)
	}
	if _, err := os.Stat(e.path("g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("CREATE_OPEN during grace made the file: %v", err)
	}
	close(late.hold)
	late.comeBack(t)
	if rep := waitGrace(t, e); rep.Reason != consist.GraceAllReclaimed {
		t.Fatalf("grace report %+v", rep)
	}
	res := p.createOpenXID(xid, e.root, "g", nfs3.Guarded, 0, nil)
	ok(t, "CREATE_OPEN after grace, same xid", res.Status, nil)
	ok(t, "its open", res.Open.Status, nil)
}

// TestSNFSCreateOpenBreaksPromise: a CREATE_OPEN in a directory another
// client holds a promise on is answered after the promise's break (as
// CREATE), and its own promise is kept.
func TestSNFSCreateOpenBreaksPromise(t *testing.T) {
	t.Parallel()
	e, holder, a, D, _ := newDirPromiseEnv(t, "createopen-promise")
	p := newProtoClient(t, e, "createopen-changer")
	promise(t, a, D)
	holder.all()
	res := p.createOpen(D, "made", nfs3.Guarded)
	ok(t, "CREATE_OPEN", res.Status, nil)
	ok(t, "its open", res.Open.Status, nil)
	if !has(holder.all(), D) {
		t.Fatal("CREATE_OPEN answered before the holder's promise on its directory was broken")
	}
}

// TestSNFSCreateOpenReplayAfterRestart: a CREATE_OPEN's reply is saved like
// CREATE's: retransmitted with the same xid after a server restart, it is
// answered from the saved reply (a GUARDED create executed again would
// answer EXIST), which names the old server's boot verifier: the client
// knows the open it reports is not counted by the new server.
func TestSNFSCreateOpenReplayAfterRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	p := newProtoClient(t, e, "createopen-replay")
	xid := p.rpc.NextXID()
	first := p.createOpenXID(xid, e.root, "r", nfs3.Guarded, 0, nil)
	ok(t, "CREATE_OPEN", first.Status, nil)
	ok(t, "its open", first.Open.Status, nil)
	restartGrace(e, time.Hour)
	again := p.createOpenXID(xid, e.root, "r", nfs3.Guarded, 0, nil)
	if again.Status != nfs3.OK || !bytes.Equal(again.File, first.File) || again.ServerVerf != first.ServerVerf {
		t.Fatalf("retransmitted after the restart: %v (verifier %x); want the first reply (verifier %x)", again.Status, again.ServerVerf, first.ServerVerf)
	}
	// The replay was answered during the grace period that p, expected,
	// ends with its RECLAIM_DONE (it holds nothing to reclaim).
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	var done snfs1.StatusRes
	if err := p.rpc.Call(ctx, snfs1.ProcReclaimDone, &snfs1.ClientArgs{Client: id}, &done); err != nil || done.Status != nfs3.OK {
		t.Fatalf("RECLAIM_DONE: %v %v", done.Status, err)
	}
	waitGrace(t, e)
	fresh := p.createOpen(e.root, "fresh", nfs3.Guarded)
	ok(t, "a new CREATE_OPEN after the restart", fresh.Status, nil)
	if fresh.ServerVerf == first.ServerVerf {
		t.Fatal("the server's boot verifier did not change with the restart")
	}
}
