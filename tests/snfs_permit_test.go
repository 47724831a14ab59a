package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
)

// Write-back permits and reintegration (docs/protocol.md section 21) end to
// end: a raw session holds a directory's permit and a modification log of
// its own; other sessions, a plain NFSv3 client and a local process change
// the directory; the holder reintegrates when recalled.

// permitHolder is a CallbackHandler that holds a log: a recall sends the
// log with REINTEGRATE (after delay), then answers.
type permitHolder struct {
	mu       sync.Mutex
	s        *client.Session
	permit   snfs1.PermitRef
	log      []snfs1.CMLRecord
	results  []snfs1.CMLResult
	err      error
	delay    time.Duration
	stuck    chan struct{} // non-nil: a recall is answered only once it is closed, and nothing is sent
	recalled chan nfs3.FH
	breaks   chan nfs3.FH // directory promise breaks (INVALIDATE)
}

func newPermitHolder() *permitHolder {
	return &permitHolder{recalled: make(chan nfs3.FH, 16), breaks: make(chan nfs3.FH, 64)}
}

func (h *permitHolder) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	if mode == state.Invalidate {
		h.breaks <- fh
		return state.OK
	}
	if mode != state.RecallPermit {
		return state.OK
	}
	h.recalled <- fh
	if h.stuck != nil {
		select {
		case <-h.stuck:
		case <-ctx.Done():
		}
		return state.OK
	}
	time.Sleep(h.delay)
	h.mu.Lock()
	log, s, p := h.log, h.s, h.permit
	h.log = nil
	h.mu.Unlock()
	if len(log) > 0 {
		res, err := s.Reintegrate(ctx, []snfs1.PermitRef{p}, log)
		h.mu.Lock()
		if err != nil {
			h.err = err
		} else {
			h.results = append(h.results, res.Results...)
		}
		h.mu.Unlock()
	}
	return state.OK
}

// permitEnv is a server (rw, no_root_squash) whose export holds a directory
// d with the given files (each "x"), and d's handle.
func permitEnv(t *testing.T, files ...string) (*env, nfs3.FH) {
	t.Helper()
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(e.path("d/"+f), []byte("x"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return e, e.lookup(e.root, "d")
}

// permitHolderEnv is permitEnv with a session named name that holds d's
// permit, its callbacks answered by a permitHolder with nothing logged.
func permitHolderEnv(t *testing.T, name string) (*env, nfs3.FH, *client.Session, snfs1.PermitRef) {
	t.Helper()
	e, D := permitEnv(t)
	a := dialSNFS(t, e, name, newPermitHolder())
	return e, D, a, getPermit(t, a, D)
}

// reintegrated sends recs with REINTEGRATE under p and fails the test
// unless every record was applied or answered and the last applied LSN is
// applied.
func reintegrated(t *testing.T, a *client.Session, p snfs1.PermitRef, applied uint64, recs []snfs1.CMLRecord) *snfs1.ReintegrateRes {
	t.Helper()
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, recs)
	if err != nil || res.Failed() != nil || res.Applied != applied {
		t.Fatalf("%v %+v", err, res)
	}
	return res
}

// cacheForWrite opens dir's name for writing through s until the server lets
// s cache it (the first opens are not cached while the server probes s's
// callback path), and leaves that open held: a writing cacher the server
// must call back before anything else changes the file.
func cacheForWrite(t *testing.T, s *client.Session, dir nfs3.FH, name string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		fh, okRes, err := s.OpenName(cctx, dir, name, state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if okRes.CacheEnabled {
			return
		}
		if _, err := s.Close(cctx, fh, state.Write, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getPermit asks for dir's permit until it is granted (the first asks are
// refused while the server's probe of the session's callback path is out).
func getPermit(t *testing.T, s *client.Session, dir nfs3.FH) snfs1.PermitRef {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, granted, err := s.GetPermit(ctx, dir)
		if err != nil {
			t.Fatalf("GET_PERMIT: %v", err)
		}
		if granted {
			if id == 0 {
				t.Fatal("GET_PERMIT granted permit 0")
			}
			return snfs1.PermitRef{Dir: dir, Permit: id}
		}
		if time.Now().After(deadline) {
			t.Fatal("GET_PERMIT never granted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// plainNames lists the directory dir through the plain client (a read:
// it recalls another client's permit on dir first).
func plainNames(t *testing.T, e *env, dir nfs3.FH) []string {
	t.Helper()
	return namesBy(t, e.nfs, dir)
}

// namesBy lists the directory dir through c: a permit holder's own
// connection (Session.NFS) reads it without recalling its permit.
func namesBy(t *testing.T, c *client.NFS, dir nfs3.FH) []string {
	t.Helper()
	var out []string
	cookie, verf := uint64(0), [nfs3.CookieVerfSize]byte{}
	for {
		res, err := c.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, Count: 32768})
		ok(t, "READDIR", res.Status, err)
		for _, en := range res.Entries {
			if en.Name != "." && en.Name != ".." {
				out = append(out, en.Name)
			}
			cookie = en.Cookie
		}
		verf = res.CookieVerf
		if res.EOF || len(res.Entries) == 0 {
			break
		}
	}
	sort.Strings(out)
	return out
}

func createRec(lsn uint64, dir snfs1.ObjRef, name string, prov uint64) snfs1.CMLRecord {
	mode := uint32(0o644)
	return snfs1.CMLRecord{LSN: lsn, Op: snfs1.CMLCreate, Dir: dir, Name: name, Attr: nfs3.Sattr{Mode: &mode}, New: prov}
}

// TestSNFSPermitGrantBreaksPromise: GET_PERMIT is answered only after every
// other client's promise on the directory is broken; another client's
// LISTDIR recalls the permit and is answered promised; while the permit is
// held, another client gets no permit there; released, both are granted
// again.
func TestSNFSPermitGrantBreaksPromise(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	other := newDirBreaks()
	other.delay = 200 * time.Millisecond // a grant not waiting for the break comes first
	b := dialSNFS(t, e, "permit-grant-b", other)
	a := dialSNFS(t, e, "permit-grant-a", newPermitHolder())
	promise(t, b, D)
	other.all()
	p := getPermit(t, a, D)
	if !other.take(D) {
		t.Fatal("GET_PERMIT answered before the other client's promise was broken")
	}
	// Another client's read of the directory recalls the permit first
	// (section 21.4, "Reads recall too"), and is then answered promised.
	if res, err := b.ListDir(ctx, D, 0, [nfs3.CookieVerfSize]byte{}, 4096, 32768); err != nil || !res.Promised {
		t.Fatalf("another client's LISTDIR under the permit: %v %+v", err, res)
	}
	if st := e.srv.PermitStats(); st.Recalls != 1 || st.Permits != 0 {
		t.Fatalf("stats %+v after another client's LISTDIR: want the permit recalled", st)
	}
	other.all()
	p = getPermit(t, a, D)
	if !other.take(D) {
		t.Fatal("GET_PERMIT answered before the other client's new promise was broken")
	}
	if _, granted, err := b.GetPermit(ctx, D); err != nil || granted {
		t.Fatalf("a second permit granted: %v", err)
	}
	if id, granted, err := a.GetPermit(ctx, D); err != nil || !granted || id != p.Permit {
		t.Fatalf("the holder's GET_PERMIT again: %d %v %v", id, granted, err)
	}
	if err := a.PermitRelease(ctx, []snfs1.PermitRef{p}); err != nil {
		t.Fatal(err)
	}
	promise(t, b, D)
	getPermit(t, b, D) // its own promise is not broken by its own permit
	// Released twice: by the recall's answer and by PERMIT_RELEASE.
	if st := e.srv.PermitStats(); st.Permits != 1 || st.Recalls != 1 || st.Releases != 2 || st.Refusals == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSNFSPermitPlainCreateWaits: a plain NFSv3 client's CREATE in a
// directory whose permit a session holds recalls the permit and waits until
// the holder has reintegrated its log: the holder's names exist before the
// plain CREATE runs (its GUARDED CREATE of one of them fails EXIST), and
// the plain client then lists every one.
func TestSNFSPermitPlainCreateWaits(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := newPermitHolder()
	h.delay = 200 * time.Millisecond
	a := dialSNFS(t, e, "permit-plain", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	for i := 1; i <= 3; i++ {
		h.log = append(h.log, createRec(uint64(i), snfs1.ObjRef{FH: D}, fmt.Sprintf("x%d", i), uint64(i)))
	}
	h.mu.Unlock()
	mode := uint32(0o644)
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "x2"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	want(t, "plain CREATE of a name the holder created", r.Status, err, nfs3.ErrExist)
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, D) {
			t.Fatalf("recall of %x, not the directory", fh)
		}
	default:
		t.Fatal("CREATE answered without a recall")
	}
	h.mu.Lock()
	results, rerr := h.results, h.err
	h.mu.Unlock()
	if rerr != nil || len(results) != 3 {
		t.Fatalf("the holder's reintegration: %v, %d results", rerr, len(results))
	}
	for _, res := range results {
		if res.Status != nfs3.OK || res.Obj == nil || res.Attr == nil {
			t.Fatalf("result %+v", res)
		}
	}
	r, err = e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "y"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "plain CREATE after the recall", r.Status, err)
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[x1 x2 x3 y]" {
		t.Fatalf("the plain client lists %s", got)
	}
	// The permit is gone: the holder's reintegration under it is refused.
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(4, snfs1.ObjRef{FH: D}, "late", 4)})
	if err != nil || res.Failed() == nil || res.Failed().Status != snfs1.ErrNoPermit {
		t.Fatalf("a reintegration after the recall: %v %+v", err, res)
	}
	if st := e.srv.PermitStats(); st.Recalls != 1 || st.Waits != 1 || st.Releases != 1 || st.Permits != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSNFSPermitOtherSessionWaits: another session's change through its own
// registered connection (a RENAME into the directory) waits for the recall
// as a plain client's does; the holder's own changes do not recall.
func TestSNFSPermitOtherSessionWaits(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("e/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	D, E := e.lookup(e.root, "d"), e.lookup(e.root, "e")
	h := newPermitHolder()
	h.delay = 100 * time.Millisecond
	a := dialSNFS(t, e, "permit-session-a", h)
	b := dialSNFS(t, e, "permit-session-b", newDirBreaks())
	p := getPermit(t, a, D)
	mode := uint32(0o644)
	r, err := a.NFS().Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "own"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "the holder's own CREATE", r.Status, err)
	if len(h.recalled) != 0 {
		t.Fatal("the holder's own CREATE recalled its permit")
	}
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "f", 1)}
	h.mu.Unlock()
	rr, err := b.NFS().Rename(ctx, E, "f", D, "f")
	ok(t, "the other session's RENAME over the holder's new name", rr.Status, err)
	if len(h.recalled) != 1 {
		t.Fatal("RENAME answered without a recall")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil || len(h.results) != 1 || h.results[0].Status != nfs3.OK {
		t.Fatalf("the holder's reintegration before the RENAME: %v %+v", h.err, h.results)
	}
}

// TestSNFSPermitLocalProcess: a local process's change of the directory
// recalls the permit at once (it cannot wait: it is made).
func TestSNFSPermitLocalProcess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := newPermitHolder()
	a := dialSNFS(t, e, "permit-local", h)
	getPermit(t, a, D)
	start := time.Now()
	if out, err := command("touch", e.path("d/z")).CombinedOutput(); err != nil {
		t.Fatalf("touch: %v: %s", err, out)
	}
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, D) {
			t.Fatalf("recall of %x", fh)
		}
		t.Logf("recalled %v after the local change", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("a local process's change did not recall the permit")
	}
}

// TestSNFSPermitBatch: 1,000 creates and 500 unlinks, with a directory made
// and a file made in it by provisional handle, reintegrate in two
// REINTEGRATEs; every create gets its real handle (the one LOOKUP gives);
// the directory holds what the log left.
func TestSNFSPermitBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-batch")
	var log []snfs1.CMLRecord
	lsn := uint64(0)
	add := func(r snfs1.CMLRecord) { lsn++; r.LSN = lsn; log = append(log, r) }
	const n = 1000
	for i := 0; i < n; i++ {
		add(createRec(0, snfs1.ObjRef{FH: D}, fmt.Sprintf("f%04d", i), uint64(i+1)))
	}
	for i := 0; i < n; i += 2 {
		add(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: fmt.Sprintf("f%04d", i)})
	}
	mode := uint32(0o755)
	add(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: D}, Name: "sub", Attr: nfs3.Sattr{Mode: &mode}, New: 5000})
	add(createRec(0, snfs1.ObjRef{Prov: 5000}, "inner", 5001))
	add(snfs1.CMLRecord{Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "f0001", ToDir: snfs1.ObjRef{Prov: 5000}, ToName: "moved"})
	m := uint32(0o600)
	add(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: 4}, Attr: nfs3.Sattr{Mode: &m}})
	handles := map[string]nfs3.FH{}
	rpcs := 0
	for start := 0; start < len(log); start += snfs1.ReintegrateMax {
		batch := log[start:min(start+snfs1.ReintegrateMax, len(log))]
		// A provisional id from an earlier batch is the client's to replace
		// with the real handle.
		for i := range batch {
			for _, o := range []*snfs1.ObjRef{&batch[i].Dir, &batch[i].Obj, &batch[i].ToDir} {
				if o.Prov != 0 {
					if fh := handles[fmt.Sprint(o.Prov)]; fh != nil {
						*o = snfs1.ObjRef{FH: fh}
					}
				}
			}
		}
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
		rpcs++
		if err != nil {
			t.Fatal(err)
		}
		if f := res.Failed(); f != nil || len(res.Results) != len(batch) || res.Applied != batch[len(batch)-1].LSN {
			t.Fatalf("batch at %d: failed %+v, %d results, applied %d", start, f, len(res.Results), res.Applied)
		}
		for i, r := range res.Results {
			if batch[i].New != 0 {
				if r.Obj == nil || r.Attr == nil {
					t.Fatalf("LSN %d made no handle", r.LSN)
				}
				handles[fmt.Sprint(batch[i].New)] = r.Obj
				handles[batch[i].Name] = r.Obj
			}
			if batch[i].Op == snfs1.CMLMkdir && r.Permit == 0 {
				t.Fatal("MKDIR gave no permit on the new directory")
			}
		}
	}
	if rpcs != 2 {
		t.Fatalf("%d REINTEGRATEs", rpcs)
	}
	got := plainNames(t, e, D)
	if len(got) != n/2 || got[0] != "f0003" || got[len(got)-1] != "sub" {
		t.Fatalf("%d names, %v ... %v", len(got), got[:2], got[len(got)-2:])
	}
	for _, nm := range got {
		if nm == "sub" {
			continue
		}
		if fh := e.lookup(D, nm); !bytes.Equal(fh, handles[nm]) {
			t.Fatalf("%s: REINTEGRATE's handle is not LOOKUP's", nm)
		}
	}
	sub := e.lookup(D, "sub")
	if !bytes.Equal(sub, handles["sub"]) || fmt.Sprint(plainNames(t, e, sub)) != "[inner moved]" {
		t.Fatalf("sub holds %v", plainNames(t, e, sub))
	}
	if st, err := os.Stat(e.path("d/f0003")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("SETATTR by provisional handle: %v %v", st.Mode(), err)
	}
}

// TestSNFSPermitResend: a batch sent again (a retransmission with a new
// xid, as after a client crash) applies nothing twice and answers the real
// handles again; so does one sent after a server restart (the last applied
// LSN is durable), even though the permits did not survive it.
func TestSNFSPermitResend(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-resend")
	log := []snfs1.CMLRecord{
		createRec(10, snfs1.ObjRef{FH: D}, "a", 1),
		createRec(11, snfs1.ObjRef{FH: D}, "b", 2),
		{LSN: 12, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "a"},
		createRec(13, snfs1.ObjRef{FH: D}, "a", 3),
		{LSN: 14, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "b", ToDir: snfs1.ObjRef{FH: D}, ToName: "c"},
	}
	first, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, log)
	if err != nil || first.Failed() != nil || first.Applied != 14 {
		t.Fatalf("first: %v %+v", err, first)
	}
	check := func(what string, res *snfs1.ReintegrateRes) {
		t.Helper()
		if res.Failed() != nil || res.Applied != 14 || len(res.Results) != len(log) {
			t.Fatalf("%s: %+v", what, res)
		}
		if got := fmt.Sprint(plainNames(t, e, D)); got != "[a c]" {
			t.Fatalf("%s: the directory holds %s", what, got)
		}
		// The create of "a" at LSN 13 is answered with the file "a" names.
		if !bytes.Equal(res.Results[3].Obj, first.Results[3].Obj) {
			t.Fatalf("%s: LSN 13's handle differs", what)
		}
	}
	again, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, log)
	if err != nil {
		t.Fatal(err)
	}
	check("resent", again)
	e.restart()
	again, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, log)
	if err != nil {
		t.Fatal(err)
	}
	check("resent after a restart", again)
	// A new record needs a permit of the new server.
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(15, snfs1.ObjRef{FH: D}, "d", 4)})
	if err != nil || res.Failed() == nil || res.Failed().Status != snfs1.ErrNoPermit || res.Applied != 14 {
		t.Fatalf("a new record under the old server's permit: %v %+v", err, res)
	}
	p = getPermit(t, a, D)
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(15, snfs1.ObjRef{FH: D}, "d", 4)})
	if err != nil || res.Failed() != nil || res.Applied != 15 {
		t.Fatalf("under a new permit: %v %+v", err, res)
	}
}

// TestSNFSPermitFailureMidBatch: the batch stops at the first record that
// fails; the reply says which LSN and why, and nothing after it is applied.
func TestSNFSPermitFailureMidBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/taken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	D, E := e.lookup(e.root, "d"), e.lookup(e.root, "e")
	a := dialSNFS(t, e, "permit-midbatch", newPermitHolder())
	p := getPermit(t, a, D)
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "one", 1),
		createRec(2, snfs1.ObjRef{FH: D}, "taken", 2), // another's change meanwhile: the client's conflict
		createRec(3, snfs1.ObjRef{FH: D}, "three", 3),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := res.Failed()
	if f == nil || f.LSN != 2 || f.Status != nfs3.ErrExist || len(res.Results) != 2 || res.Applied != 1 {
		t.Fatalf("%+v", res)
	}
	if got := fmt.Sprint(namesBy(t, a.NFS(), D)); got != "[one taken]" {
		t.Fatalf("the directory holds %s", got)
	}
	// A record in a directory without a permit fails SNFS_ERR_NOPERMIT.
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(3, snfs1.ObjRef{FH: D}, "three", 3),
		createRec(4, snfs1.ObjRef{FH: E}, "x", 4),
	})
	if err != nil || res.Failed() == nil || res.Failed().LSN != 4 || res.Failed().Status != snfs1.ErrNoPermit || res.Applied != 3 {
		t.Fatalf("%v %+v", err, res)
	}
	if got := fmt.Sprint(plainNames(t, e, E)); got != "[]" {
		t.Fatalf("e holds %s", got)
	}
}

// TestSNFSPermitRevoked: a holder that does not answer its recall holds the
// plain client's change up to the callback deadline, not longer; its permit
// is then revoked, and its reintegration under it refused.
func TestSNFSPermitRevoked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = 700 * time.Millisecond
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	h := newPermitHolder()
	h.stuck = make(chan struct{})
	a := dialSNFS(t, e, "permit-revoked", h)
	t.Cleanup(func() { close(h.stuck) }) // before the session's Disconnect
	p := getPermit(t, a, D)
	start := time.Now()
	mode := uint32(0o644)
	r, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "n"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(t, "CREATE", r.Status, err)
	took := time.Since(start)
	if len(h.recalled) != 1 {
		t.Fatal("no recall was sent")
	}
	if took < timeout {
		t.Fatalf("CREATE answered after %v, before the recall's deadline %v", took, timeout)
	}
	if st := e.srv.PermitStats(); st.Revocations != 1 || st.Permits != 0 {
		t.Fatalf("stats %+v", st)
	}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "mine", 1)})
	if err != nil || res.Failed() == nil || res.Failed().Status != snfs1.ErrNoPermit || res.Applied != 0 {
		t.Fatalf("a reintegration under a revoked permit: %v %+v", err, res)
	}
	t.Logf("CREATE answered %v after it was sent (callback deadline %v)", took, timeout)
}

// TestSNFSPermitReintegrateWaitsForCallbacks: a record that removes a file
// another session caches for writing waits for that session's callback
// (section 14's rule, as a REMOVE would), and the batch goes on after it:
// the records before and after it are applied, and the reply comes once the
// cacher has answered.
func TestSNFSPermitReintegrateWaitsForCallbacks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "f")
	cacher := newDirBreaks()
	cacher.delay = 200 * time.Millisecond
	b := dialSNFS(t, e, "permit-cb-b", cacher)
	a := dialSNFS(t, e, "permit-cb-a", newPermitHolder())
	cacheForWrite(t, b, D, "f")
	p := getPermit(t, a, D)
	for len(cacher.ch) > 0 {
		<-cacher.ch
	}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "g", 1),
		{LSN: 2, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(3, snfs1.ObjRef{FH: D}, "h", 2),
	})
	if err != nil || res.Failed() != nil || len(res.Results) != 3 || res.Applied != 3 {
		t.Fatalf("%v %+v", err, res)
	}
	if len(cacher.ch) == 0 {
		t.Fatal("REINTEGRATE answered before the caching session was called back")
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[g h]" {
		t.Fatalf("the directory holds %s", got)
	}
}

// TestSNFSPermitGrantWaitsForBreak: a promise holder that does not answer
// its break holds GET_PERMIT up to the break's deadline, not longer: the
// permit is then granted.
func TestSNFSPermitGrantWaitsForBreak(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const timeout = 700 * time.Millisecond
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.CallbackTimeout = timeout })
	for _, d := range []string{"d", "x"} {
		if err := os.Mkdir(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	D, X := e.lookup(e.root, "d"), e.lookup(e.root, "x")
	h := newStallBreaks()
	b := dialSNFS(t, e, "permit-grant-stuck-b", h)
	t.Cleanup(func() { close(h.release) }) // before the session's Disconnect
	a := dialSNFS(t, e, "permit-grant-stuck-a", newPermitHolder())
	getPermit(t, a, X) // until A's callback path is verified (nobody to break in x)
	promise(t, b, D)
	start := time.Now()
	id, granted, err := a.GetPermit(ctx, D)
	took := time.Since(start)
	if err != nil || !granted || id == 0 {
		t.Fatalf("GET_PERMIT: %d %v %v", id, granted, err)
	}
	select {
	case fh := <-h.called:
		if !bytes.Equal(fh, D) {
			t.Fatalf("a break of %x; want d's %x", fh, D)
		}
	default:
		t.Fatal("no break was sent")
	}
	if took < timeout {
		t.Fatalf("GET_PERMIT answered after %v, before the break's deadline %v", took, timeout)
	}
	t.Logf("GET_PERMIT answered %v after it was sent (callback deadline %v)", took, timeout)
}

// TestSNFSPermitCrashMidBatch: a server that crashed while applying a batch
// (some records applied, the last applied LSN not yet committed; made here
// by hand: the files on disk and the state database's record of a batch
// begun) does not apply those records twice when the batch is resent: each
// record after the last applied LSN and within the batch begun is checked
// for its effect, and answered (with its object) if it is there.
func TestSNFSPermitCrashMidBatch(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash")
	res := reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "a", 1)})
	addr := e.addr
	e.stop()
	// The crash: records 2 and 3 of the batch 2..4 applied, LSN 1 recorded.
	for _, f := range []string{"d/b", "d/c"} {
		if err := os.WriteFile(e.path(f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err := bolt.Open(filepath.Join(e.stateDir, "consist.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("cml"))
		var name []byte
		b.ForEach(func(k, _ []byte) error { name = append([]byte(nil), k...); return nil })
		if name == nil {
			return fmt.Errorf("no LSN record")
		}
		return b.Put(name, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1), 4))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	e.start(addr)
	p = getPermit(t, a, D)
	batch := []snfs1.CMLRecord{
		createRec(2, snfs1.ObjRef{FH: D}, "b", 2),
		createRec(3, snfs1.ObjRef{FH: D}, "c", 3),
		createRec(4, snfs1.ObjRef{FH: D}, "e", 4),
	}
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || res.Failed() != nil || res.Applied != 4 || len(res.Results) != 3 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	for i, nm := range []string{"b", "c", "e"} {
		if !bytes.Equal(res.Results[i].Obj, lookupBy(t, a.NFS(), D, nm)) {
			t.Fatalf("%s: not answered with its handle", nm)
		}
	}
	// The batch is done: a record past it is checked no more (a create of
	// an existing name is the client's conflict again).
	if err := os.WriteFile(e.path("d/x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(5, snfs1.ObjRef{FH: D}, "x", 5)})
	if err != nil || res.Failed() == nil || res.Failed().Status != nfs3.ErrExist {
		t.Fatalf("a conflict after the batch: %v %+v", err, res)
	}
}

// TestSNFSPermitAfterLocalChange: a GET_PERMIT made just after a local
// process's change of the directory, before the server's change notifier
// was drained (every 100 ms), is granted and kept: the change completed
// before it. Drained after the grant, it recalled the permit just granted
// (or, drained while the grant waited, cancelled it).
func TestSNFSPermitAfterLocalChange(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := newPermitHolder()
	a := dialSNFS(t, e, "permit-after-local", h)
	getPermit(t, a, D) // the callback path verified
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
		_, granted, err := a.GetPermit(ctx, N)
		if err != nil {
			t.Fatalf("GET_PERMIT: %v", err)
		}
		if !granted {
			t.Fatalf("%s: GET_PERMIT after a local change completed before it: not granted", name)
		}
	}
	time.Sleep(300 * time.Millisecond) // the notifier drained again
	select {
	case fh := <-h.recalled:
		t.Fatalf("a permit granted after the local change was recalled for it (%x)", fh)
	default:
	}
}
