package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
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
	// delay is how long it takes to drop the cache before it records the
	// callback and answers: a reply not waiting for the answer would come
	// first.
	delay time.Duration
	// began, if not nil, gets a token (never blocking) as each callback
	// arrives, before its delay.
	began chan struct{}
}

func newDirBreaks() *dirBreaks { return &dirBreaks{ch: make(chan struct{}, 1024)} }

func (b *dirBreaks) Callback(_ context.Context, fh nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	select {
	case b.began <- struct{}{}:
	default:
	}
	time.Sleep(b.delay)
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

// A dirChange is a change to the export that breaks the promises held on
// dirs: setup (if any) runs before the promises are taken, and names what do
// changes.
type dirChange struct {
	what  string
	dirs  []nfs3.FH
	setup func() string
	do    func(string) error
}

// nfsChanges are the NFSv3 procedures that change directory d (or d and e)
// of e's export, made through c; who prefixes the names they create.
func nfsChanges(e *env, c *client.NFS, who string, D, E nfs3.FH) []dirChange {
	n := 0
	name := func() string { n++; return who + "-" + string(rune('a'+n)) }
	mode := uint32(0o644)
	st := func(s nfs3.Status, err error) error {
		if err == nil && s != nfs3.OK {
			err = fmt.Errorf("status %v", s)
		}
		return err
	}
	return []dirChange{
		{"CREATE", []nfs3.FH{D}, name, func(nm string) error {
			r, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: nm}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
			return st(r.Status, err)
		}},
		{"MKDIR", []nfs3.FH{D}, name, func(nm string) error {
			r, err := c.Mkdir(ctx, D, nm, nfs3.Sattr{Mode: &mode})
			return st(r.Status, err)
		}},
		{"SYMLINK", []nfs3.FH{D}, name, func(nm string) error {
			r, err := c.Symlink(ctx, D, nm, "target", nfs3.Sattr{})
			return st(r.Status, err)
		}},
		{"MKNOD", []nfs3.FH{D}, name, func(nm string) error {
			r, err := c.Mknod(ctx, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: D, Name: nm}, Type: nfs3.TypeFifo, Attr: nfs3.Sattr{Mode: &mode}})
			return st(r.Status, err)
		}},
		{"LINK", []nfs3.FH{D}, name, func(nm string) error {
			r, err := c.Link(ctx, e.lookup(D, "f"), D, nm)
			return st(r.Status, err)
		}},
		{"SETATTR of a listed file", []nfs3.FH{D}, name, func(string) error {
			m := uint32(0o600)
			r, err := c.Setattr(ctx, &nfs3.SetattrArgs{Object: e.lookup(D, "f"), New: nfs3.Sattr{Mode: &m}})
			return st(r.Status, err)
		}},
		{"WRITE of a listed file", []nfs3.FH{D}, name, func(string) error {
			r, err := c.Write(ctx, e.lookup(D, "f"), 0, []byte("yy"), nfs3.FileSync)
			return st(r.Status, err)
		}},
		{"RENAME across directories", []nfs3.FH{D, E}, func() string {
			nm := name()
			os.WriteFile(e.path("d/"+nm), nil, 0o644)
			return nm
		}, func(nm string) error {
			r, err := c.Rename(ctx, D, nm, E, nm)
			return st(r.Status, err)
		}},
		{"REMOVE", []nfs3.FH{D}, func() string {
			nm := name()
			os.WriteFile(e.path("d/"+nm), nil, 0o644)
			return nm
		}, func(nm string) error {
			r, err := c.Remove(ctx, D, nm)
			return st(r.Status, err)
		}},
		{"RMDIR", []nfs3.FH{D}, func() string {
			nm := name()
			os.Mkdir(e.path("d/"+nm), 0o755)
			return nm
		}, func(nm string) error {
			r, err := c.Rmdir(ctx, D, nm)
			return st(r.Status, err)
		}},
	}
}

// localChanges are changes to directories d and e of e's export by
// processes on the server machine: other processes than the in-process
// server, whose own changes the change notifier does not report.
func localChanges(e *env, D, E nfs3.FH) []dirChange {
	local := func(name string, args ...string) func(string) error {
		return func(string) error {
			if out, err := command(name, args...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
			}
			return nil
		}
	}
	return []dirChange{
		{"rename(2) across directories", []nfs3.FH{D, E}, nil, local("mv", e.path("d/f"), e.path("e/f"))},
		{"creat(2)", []nfs3.FH{E}, nil, local("touch", e.path("e/g"))},
		{"chmod(2) of a listed file", []nfs3.FH{E}, nil, local("chmod", "600", e.path("e/f"))},
		{"unlink(2)", []nfs3.FH{E}, nil, local("rm", e.path("e/g"))},
	}
}

// newDirPromiseEnv is an env whose export holds directories d and e and a
// file d/f, with a session holder registered as name: the handles of d and e.
func newDirPromiseEnv(t *testing.T, name string) (e *env, holder *dirBreaks, a *client.Session, D, E nfs3.FH) {
	t.Helper()
	requireRoot(t)
	e = newEnv(t, "rw,no_root_squash")
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	holder = newDirBreaks()
	a = dialSNFS(t, e, name, holder)
	return e, holder, a, e.lookup(e.root, "d"), e.lookup(e.root, "e")
}

// TestDirPromiseBroken: for each kind of change, by another session (its
// NFSv3 calls on its registered connection), by a plain NFSv3 client and by
// a process on the server machine, the holder is called back with the
// handles of the directories changed: before the change's reply for the
// first two; promptly after the change for a local process, which the server
// sees through its change notifier (drained every 100 ms).
func TestDirPromiseBroken(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"session", "plain", "local"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			e, holder, a, D, E := newDirPromiseEnv(t, "dirpromise-"+by)
			var changes []dirChange
			switch by {
			case "session":
				changes = nfsChanges(e, dialSNFS(t, e, "dirpromise-changer", newDirBreaks()).NFS(), by, D, E)
			case "plain":
				changes = nfsChanges(e, e.nfs, by, D, E)
			case "local":
				changes = localChanges(e, D, E)
			}
			for _, c := range changes {
				nm := ""
				if c.setup != nil {
					nm = c.setup()
				}
				for _, dir := range c.dirs {
					promise(t, a, dir)
				}
				holder.all()
				if err := c.do(nm); err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				if by == "local" {
					took := waitBreaks(t, holder, c.what, c.dirs...)
					t.Logf("%s: promises broken %v after the change", c.what, took)
					continue
				}
				// The reply came: every break must have been answered already.
				got := holder.all()
				for _, dir := range c.dirs {
					if !has(got, dir) {
						t.Errorf("%s answered before the holder's promise on %x was broken", c.what, dir)
					}
				}
			}
		})
	}
}

// TestDirPromiseOwnChange: the changer's own promise is kept: A creates in
// d through its own connection.
func TestDirPromiseOwnChange(t *testing.T) {
	t.Parallel()
	_, holder, a, D, _ := newDirPromiseEnv(t, "dirpromise-own")
	promise(t, a, D)
	holder.take(nil)
	mode := uint32(0o644)
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

// waitBreaks waits (bounded) until every handle of want was called back,
// and returns how long it took.
func waitBreaks(t *testing.T, b *dirBreaks, what string, want ...nfs3.FH) time.Duration {
	t.Helper()
	start := time.Now()
	var got []nfs3.FH
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		got = append(got, b.all()...)
		missing := 0
		for _, fh := range want {
			if !has(got, fh) {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start)
		}
		select {
		case <-b.ch:
		case <-deadline.C:
			t.Fatalf("%s: %d of %d promises not broken after 10 s", what, missing, len(want))
		}
	}
}

// TestDirPromiseBound: a client holds at most Dirs.MaxPerClient promises; a
// LISTDIR past the bound is answered without one, and DIR_RELEASE makes room.
func TestDirPromiseBound(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.Dirs.MaxPerClient = 3 })
	var dirs []nfs3.FH
	for _, d := range []string{"a", "b", "c", "d"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, e.lookup(e.root, d))
	}
	a := dialSNFS(t, e, "dirpromise-bound", newDirBreaks())
	b := dialSNFS(t, e, "dirpromise-bound-b", newDirBreaks())
	for _, d := range dirs[:3] {
		promise(t, a, d)
	}
	res, err := a.ListDir(ctx, dirs[3], 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768)
	if err != nil {
		t.Fatal(err)
	}
	if res.Promised {
		t.Fatal("a fourth promise granted past the bound of 3")
	}
	if st := e.srv.DirStats(); st.Promises != 3 || st.Refusals == 0 {
		t.Fatalf("stats %+v", st)
	}
	promise(t, b, dirs[3]) // the bound is per client
	if err := a.DirRelease(ctx, []nfs3.FH{dirs[0]}); err != nil {
		t.Fatal(err)
	}
	if res, err := a.ListDir(ctx, dirs[3], 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768); err != nil || !res.Promised {
		t.Fatalf("no promise after DIR_RELEASE: %v", err)
	}
	if st := e.srv.DirStats(); st.Promises != 4 || st.Releases != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDirPromiseRestart: promises are not kept across a server restart (the
// new server_verf voids them at the client); after it, a new LISTDIR gets a
// promise, and a change is answered only once that one is broken.
func TestDirPromiseRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	holder := newDirBreaks()
	holder.delay = 200 * time.Millisecond // a CREATE not waiting for the break is answered first
	a := dialSNFS(t, e, "dirpromise-restart", holder)
	D := e.lookup(e.root, "d")
	promise(t, a, D)
	verf := a.ServerVerifier()
	e.restart()
	if st := e.srv.DirStats(); st.Promises != 0 {
		t.Fatalf("promises after a restart: %+v", st)
	}
	promise(t, a, D) // reconnects, registers again (new server_verf)
	if a.ServerVerifier() == verf {
		t.Fatal("the session did not see the restart")
	}
	holder.all()
	mode := uint32(0o644)
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "n"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "CREATE after the restart", r.Status, err)
	if !holder.take(D) {
		t.Fatal("CREATE answered before the promise granted after the restart was broken")
	}
}

// TestDirPromiseUnansweredBreak: a holder that does not answer its break
// holds a change up to the callback deadline, not longer and not for ever:
// the change is then answered (it was made; it cannot be refused), and the
// promise is gone (the holder's lease has run out by then).
func TestDirPromiseUnansweredBreak(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	const timeout = 700 * time.Millisecond
	e.restartWith(func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	h := newStallBreaks()
	a := dialSNFS(t, e, "dirpromise-stuck", h)
	t.Cleanup(func() { close(h.release) }) // before the session's Disconnect (cleanups run last first)
	D := e.lookup(e.root, "d")
	promise(t, a, D)
	start := time.Now()
	mode := uint32(0o644)
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "n"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "CREATE", r.Status, err)
	took := time.Since(start)
	select {
	case fh := <-h.called:
		if !bytes.Equal(fh, D) {
			t.Fatalf("a break of %x; want d's %x", fh, D)
		}
	default:
		t.Fatal("no break was sent")
	}
	if took < timeout {
		t.Fatalf("CREATE answered after %v, before the break's deadline %v", took, timeout)
	}
	if st := e.srv.DirStats(); st.Timeouts != 1 || st.Promises != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("CREATE answered %v after it was sent (callback deadline %v)", took, timeout)
}

// TestDirPromiseAfterFileCallbacks: a plain REMOVE of a file another session
// caches for writing waits first for that session's callback (section 14),
// then removes, then waits for the directory's promise to be broken: the
// holder has its break, and the cacher its callback, before the reply.
func TestDirPromiseAfterFileCallbacks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	holder := newDirBreaks()
	holder.delay = 200 * time.Millisecond
	a := dialSNFS(t, e, "dirpromise-after-a", holder)
	cacher := newDirBreaks()
	b := dialSNFS(t, e, "dirpromise-after-b", cacher)
	D := e.lookup(e.root, "d")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var fh nfs3.FH
	for { // until B's callback path is verified and it may cache
		var okRes *snfs1.OpenOK
		var err error
		fh, okRes, err = b.OpenName(cctx, D, "f", state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if okRes.CacheEnabled {
			break
		}
		if _, err := b.Close(cctx, fh, state.Write, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	promise(t, a, D)
	holder.all()
	for len(cacher.ch) > 0 {
		<-cacher.ch
	}
	r, err := e.nfs.Remove(ctx, D, "f")
	ok(t, "REMOVE", r.Status, err)
	if len(cacher.ch) == 0 {
		t.Error("REMOVE answered before the caching session was called back")
	}
	if !holder.take(D) {
		t.Error("REMOVE answered before the directory promise was broken")
	}
}

// TestDirPromiseAfterLocalChange: a LISTDIR made just after a local
// process's change of the directory, before the server's change notifier
// was drained (every 100 ms), is promised: the change, completed before the
// listing, is applied before its promise is recorded, and breaks nothing of
// it. It broke the promise being made when the listing's read drained it
// (no promise, and a break of it refusing the next listings until
// answered): a mount started just after a local change of its export's
// root then looked up every path through the root one call at a time.
func TestDirPromiseAfterLocalChange(t *testing.T) {
	t.Parallel()
	e, holder, a, D, _ := newDirPromiseEnv(t, "dirpromise-after-local")
	promise(t, a, D) // the callback path verified
	for i := range 5 {
		name := fmt.Sprintf("n%d", i)
		// Made by this process, the server's: not reported as a local change.
		if err := os.Mkdir(e.path(name), 0o777); err != nil {
			t.Fatal(err)
		}
		N := e.lookup(e.root, name)
		if out, err := command("touch", e.path(name+"/f")).CombinedOutput(); err != nil {
			t.Fatalf("touch: %v: %s", err, out)
		}
		res, err := a.ListDir(ctx, N, 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768)
		if err != nil {
			t.Fatalf("LISTDIR: %v", err)
		}
		if !res.Promised {
			t.Fatalf("%s: LISTDIR after a local change completed before it: not promised", name)
		}
		found := false
		for _, en := range res.Dir.Entries {
			found = found || en.Name == "f"
		}
		if !found {
			t.Fatalf("%s: the listing misses the file the local change made", name)
		}
	}
	// Changes completed before the listings break none of their promises.
	time.Sleep(300 * time.Millisecond) // the notifier drained again
	got := holder.all()
	for i := range 5 {
		if has(got, e.lookup(e.root, fmt.Sprintf("n%d", i))) {
			t.Errorf("n%d: the promise was broken", i)
		}
	}
}
