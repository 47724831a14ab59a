package tests

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/state"
)

// Directory promises (docs/protocol.md section 20) end to end: a raw session
// holds a promise from LISTDIR; every change to the directory by another
// session, a plain NFSv3 client or a local process breaks it, before the
// change is answered (or, for a local process, promptly after it).

// dirBreaks is a CallbackHandler that records the handles it is called back
// with (CB_OK to each).
type dirBreaks struct {
	mu  sync.Mutex
	got []nfs3.FH
	ch  chan struct{} // a token per callback
}

func newDirBreaks() *dirBreaks { return &dirBreaks{ch: make(chan struct{}, 1024)} }

func (b *dirBreaks) Callback(_ context.Context, fh nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	b.mu.Lock()
	if mode == state.Invalidate {
		b.got = append(b.got, fh)
	}
	b.mu.Unlock()
	b.ch <- struct{}{}
	return state.OK
}

// all returns the handles called back so far, and forgets them.
func (b *dirBreaks) all() []nfs3.FH {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.got
	b.got = nil
	return got
}

// take reports whether fh was called back, and forgets the calls so far.
func (b *dirBreaks) take(fh nfs3.FH) bool { return has(b.all(), fh) }

func has(fhs []nfs3.FH, fh nfs3.FH) bool {
	for _, g := range fhs {
		if bytes.Equal(g, fh) {
			return true
		}
	}
	return false
}

// promise lists dir with LISTDIR until the reply grants the promise (the
// first ones do not while the server's probe of the session's callback
// path is out), reading every page.
func promise(t *testing.T, s *client.Session, dir nfs3.FH) []nfs3.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var all []nfs3.Entry
		cookie, verf, promised := uint64(0), [nfs3.CookieVerfSize]byte{}, true
		for {
			res, err := s.ListDir(ctx, dir, cookie, verf, 4096, 32768)
			if err != nil {
				t.Fatalf("LISTDIR: %v", err)
			}
			promised = promised && res.Promised
			all = append(all, res.Dir.Entries...)
			if res.Dir.EOF || len(res.Dir.Entries) == 0 {
				break
			}
			cookie, verf = res.Dir.Entries[len(res.Dir.Entries)-1].Cookie, res.Dir.CookieVerf
		}
		if promised {
			return all
		}
		if ctx.Err() != nil {
			t.Fatal("LISTDIR never granted the promise")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDirPromiseBrokenBeforeChange: for each kind of change, by another
// session (its NFSv3 calls on its registered connection) and by a plain
// NFSv3 client, the holder is called back with the directory's handle before
// the change's reply comes; the changer's own promise is kept.
func TestDirPromiseBrokenBeforeChange(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	holder := newDirBreaks()
	a := dialSNFS(t, e, "dirpromise-a", holder)
	b := dialSNFS(t, e, "dirpromise-b", newDirBreaks())
	D, E := e.lookup(e.root, "d"), e.lookup(e.root, "e")
	mode := uint32(0o644)
	for _, who := range []struct {
		name string
		nfs  *client.NFS
	}{{"session", b.NFS()}, {"plain", e.nfs}} {
		c := who.nfs
		n := 0
		name := func() string { n++; return who.name + "-" + string(rune('a'+n)) }
		for _, op := range []struct {
			what  string
			dirs  []nfs3.FH // promises that must be broken
			setup func() string
			do    func(string) (nfs3.Status, error)
		}{
			{"CREATE", []nfs3.FH{D}, name, func(nm string) (nfs3.Status, error) {
				r, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: nm}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
				return r.Status, err
			}},
			{"MKDIR", []nfs3.FH{D}, name, func(nm string) (nfs3.Status, error) {
				r, err := c.Mkdir(ctx, D, nm, nfs3.Sattr{Mode: &mode})
				return r.Status, err
			}},
			{"SYMLINK", []nfs3.FH{D}, name, func(nm string) (nfs3.Status, error) {
				r, err := c.Symlink(ctx, D, nm, "target", nfs3.Sattr{})
				return r.Status, err
			}},
			{"MKNOD", []nfs3.FH{D}, name, func(nm string) (nfs3.Status, error) {
				r, err := c.Mknod(ctx, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: D, Name: nm}, Type: nfs3.TypeFifo, Attr: nfs3.Sattr{Mode: &mode}})
				return r.Status, err
			}},
			{"LINK", []nfs3.FH{D}, name, func(nm string) (nfs3.Status, error) {
				r, err := c.Link(ctx, e.lookup(D, "f"), D, nm)
				return r.Status, err
			}},
			{"SETATTR of a listed file", []nfs3.FH{D}, name, func(string) (nfs3.Status, error) {
				m := uint32(0o600)
				r, err := c.Setattr(ctx, &nfs3.SetattrArgs{Object: e.lookup(D, "f"), New: nfs3.Sattr{Mode: &m}})
				return r.Status, err
			}},
			{"WRITE of a listed file", []nfs3.FH{D}, name, func(string) (nfs3.Status, error) {
				r, err := c.Write(ctx, e.lookup(D, "f"), 0, []byte("yy"), nfs3.FileSync)
				return r.Status, err
			}},
			{"RENAME across directories", []nfs3.FH{D, E}, func() string {
				nm := name()
				os.WriteFile(e.path("d/"+nm), nil, 0o644)
				return nm
			}, func(nm string) (nfs3.Status, error) {
				r, err := c.Rename(ctx, D, nm, E, nm)
				return r.Status, err
			}},
			{"REMOVE", []nfs3.FH{D}, func() string {
				nm := name()
				os.WriteFile(e.path("d/"+nm), nil, 0o644)
				return nm
			}, func(nm string) (nfs3.Status, error) {
				r, err := c.Remove(ctx, D, nm)
				return r.Status, err
			}},
			{"RMDIR", []nfs3.FH{D}, func() string {
				nm := name()
				os.Mkdir(e.path("d/"+nm), 0o755)
				return nm
			}, func(nm string) (nfs3.Status, error) {
				r, err := c.Rmdir(ctx, D, nm)
				return r.Status, err
			}},
		} {
			nm := op.setup()
			for _, dir := range op.dirs {
				promise(t, a, dir)
			}
			holder.take(nil)
			st, err := op.do(nm)
			ok(t, who.name+" "+op.what, st, err)
			// The reply came: every break must have been answered already.
			got := holder.all()
			for _, dir := range op.dirs {
				if !has(got, dir) {
					t.Errorf("%s %s answered before the holder's promise on %x was broken", who.name, op.what, dir)
				}
			}
		}
	}
	// The changer's own promise is kept: A creates in d through its own
	// connection.
	promise(t, a, D)
	holder.take(nil)
	r, err := a.NFS().Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "own"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "own CREATE", r.Status, err)
	if holder.take(D) {
		t.Error("the holder's own CREATE broke its promise")
	}
	res, err := a.ListDir(ctx, D, 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768)
	if err != nil || !res.Promised {
		t.Fatalf("LISTDIR after the own change: %v, promised %v", err, res != nil && res.Promised)
	}
}
