package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"snfs/consist"
	"snfs/metrics"
	snfsmount "snfs/mount"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// The answers docs/protocol.md gives to questions an independent client's
// author asked (issue 22 item 5), each pinned by a test with raw protocol
// clients.

// rawRes keeps a reply's results undecoded.
type rawRes struct{ b []byte }

func (x *rawRes) Decode(r *xdr.Reader) error {
	x.b = append([]byte(nil), r.Rest()...)
	return nil
}

// fenceA makes a (which has fh open for writing, with caching) miss a
// callback that b's OPEN for writing causes, so that the server fences a for
// fh; it returns once b's OPEN succeeded.
func fenceA(t *testing.T, a, b *protoClient, fh nfs3.FH) {
	t.Helper()
	a.openCaching(fh, state.Write)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	a.setAnswer(func(*snfs1.CallbackArgs) state.Outcome { <-block; return state.OK })
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := b.open(fh, state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nfs3.OK {
			return
		}
		if res.Status != nfs3.ErrJukebox || time.Now().After(deadline) {
			t.Fatalf("B's OPEN: %v", res.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSNFSFencedCalls: every call section 13 lists is refused with
// SNFS_ERR_FENCED on the fenced client's own connection - COMMIT included
// (it was answered OK) - and each NFSv3 reply carrying 10101 is the
// procedure's failure arm with no attributes (section 6). GETATTR is not
// refused. The same calls on another connection are a plain client's, not
// the fenced protocol client's (section 14: calls are tied to a protocol
// client by the connection of its REGISTER). A new OPEN ends the fence.
func TestSNFSFencedCalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.Table.CallbackTimeout = time.Second })
	fh := e.create(e.nfs, e.root, "fenced", 0o644)
	if err := os.WriteFile(e.path("fenced"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newProtoClient(t, e, "fenced-a")
	b := newProtoClient(t, e, "opener-b")
	fenceA(t, a, b, fh)

	fenced := binary.BigEndian.AppendUint32(nil, uint32(snfs1.ErrFenced))
	noAttr := []byte{0, 0, 0, 0}            // post_op_attr: attributes_follow FALSE
	noWcc := []byte{0, 0, 0, 0, 0, 0, 0, 0} // wcc_data: pre_op_attr FALSE, post_op_attr FALSE
	size := uint64(3)
	calls := []struct {
		name string
		proc uint32
		args xdr.Encoder
		want []byte
	}{
		{"READ", nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Count: 4}, append(fenced, noAttr...)},
		{"WRITE", nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: 1, Stable: nfs3.Unstable, Data: []byte("x")}, append(fenced, noWcc...)},
		{"COMMIT", nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, append(fenced, noWcc...)},
		{"SETATTR(size)", nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Size: &size}}, append(fenced, noWcc...)},
		{"REMOVE", nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: e.root, Name: "fenced"}, append(fenced, noWcc...)},
	}
	for _, c := range calls {
		var res rawRes
		if err := a.nfs().Call(ctx, c.proc, c.args, &res); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(res.b, c.want) {
			t.Errorf("the fenced client's %s: reply body %x, want %x (SNFS_ERR_FENCED, no attributes)", c.name, res.b, c.want)
		}
	}
	var cres snfs1.CloseRes
	a.mu.Lock()
	id := a.id
	a.mu.Unlock()
	if err := a.rpc.Call(ctx, snfs1.ProcClose, &snfs1.CloseArgs{Client: id, File: fh, Mode: state.Write}, &cres); err != nil || cres.Status != snfs1.ErrFenced {
		t.Errorf("the fenced client's CLOSE: %v %v, want SNFS_ERR_FENCED", err, cres.Status)
	}
	var gres nfs3.GetattrRes
	if err := a.nfs().Call(ctx, nfs3.ProcGetattr, &nfs3.FHArgs{FH: fh}, &gres); err != nil || gres.Status != nfs3.OK {
		t.Errorf("the fenced client's GETATTR: %v %v, want OK (attributes are not what the fence protects)", err, gres.Status)
	}
	if data, _ := os.ReadFile(e.path("fenced")); string(data) != "0123456789" {
		t.Fatalf("a refused call changed the file: %q", data)
	}

	// Another connection of the same host is a plain client.
	var pres nfs3.CommitRes
	if err := e.nfs.Call(ctx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &pres); err != nil || pres.Status != nfs3.OK {
		t.Errorf("COMMIT on a connection with no REGISTER: %v %v, want OK (a plain client's)", err, pres.Status)
	}

	b.close(fh, state.Write, false)
	res, err := a.open(fh, state.Write)
	ok(t, "OPEN again by the fenced client", res.Status, err)
	var commit nfs3.CommitRes
	if err := a.nfs().Call(ctx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &commit); err != nil || commit.Status != nfs3.OK {
		t.Errorf("COMMIT after the new OPEN: %v %v, want OK", err, commit.Status)
	}
}

// TestSNFSFailedMountUnregisters: a mount in snfs mode whose MNT fails (an
// unknown export) UNREGISTERs the registration it made, so the server's next
// restart does not wait its grace period for a client that never comes back
// (section 4.7); it used to leave it behind (clients_lost=1, writes stalled).
func TestSNFSFailedMountUnregisters(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	_, err := snfsmount.Open(ctx, snfsmount.Config{Mode: snfsmount.SNFS, Addr: e.addr, Export: "/no/such/export",
		Name: "host:/mnt/failed", CacheDir: diskTempDir(t, "snfs-cache-"), Logger: quietLogger()})
	if err == nil {
		t.Fatal("a mount of an unknown export succeeded")
	}
	restartGrace(e, 30*time.Second)
	if g := waitGrace(t, e); g.Expected != 0 || g.Reason != consist.GraceNone {
		t.Fatalf("after a failed mount the restarted server expects %d clients (grace %q), want none", g.Expected, g.Reason)
	}
}

// nullAnswerer serves CB_NULL: it waits delay, then replies and, once the
// reply is on its way (queued on the connection before anything sent later),
// tells answered.
func nullAnswerer(delay time.Duration, answered chan<- struct{}) sunrpc.Handler {
	return func(ctx context.Context, c *sunrpc.Call, _ *xdr.Reader, _ *xdr.Writer) error {
		d := c.Defer()
		go func() {
			time.Sleep(delay)
			d.Reply(func(*xdr.Writer) error { return nil })
			select {
			case answered <- struct{}{}:
			default:
			}
		}()
		return nil
	}
}

// TestSNFSOpenAfterProbeAnswer: an OPEN a client sends right after its answer
// to the CB_NULL probe is granted caching (section 4.1: caching is refused
// only until the client has answered). The server applies the answer before it
// reads the next call on the connection; it used to apply it on another
// goroutine, and 1 to 5 OPENs in 20 were refused caching.
func TestSNFSOpenAfterProbeAnswer(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "probed", 0o644)
	for i := range 40 {
		answered := make(chan struct{}, 1)
		p := newProtoClientNull(t, e, fmt.Sprintf("probed-%d", i), nullAnswerer(0, answered))
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("no CB_NULL probe after REGISTER")
		}
		res, err := p.open(fh, state.Read)
		ok(t, "OPEN", res.Status, err)
		if !res.CacheEnabled {
			t.Fatalf("client %d: OPEN sent after the answer to CB_NULL refused caching", i)
		}
		p.close(fh, state.Read, false)
		p.rpc.Close()
	}
}

// TestSNFSLateProbeAnswer: the CB_NULL probe has no deadline of its own (section
// 5.0): a client that answers it after callback_timeout_ms gets no caching
// until then, and caching for the OPENs it sends after its answer. The late
// answer used to be dropped, so that OPEN was refused caching too.
func TestSNFSLateProbeAnswer(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.Table.CallbackTimeout = time.Second })
	fh := e.create(e.nfs, e.root, "late-probe", 0o644)
	answered := make(chan struct{}, 1)
	p := newProtoClientNull(t, e, "late-prober", nullAnswerer(2500*time.Millisecond, answered))
	res, err := p.open(fh, state.Read)
	ok(t, "OPEN before the answer", res.Status, err)
	if res.CacheEnabled {
		t.Fatal("OPEN granted caching before the client answered CB_NULL")
	}
	p.close(fh, state.Read, false)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not answer its probe")
	}
	res, err = p.open(fh, state.Read)
	ok(t, "OPEN after the late answer", res.Status, err)
	if !res.CacheEnabled {
		t.Fatal("OPEN sent after the late answer to CB_NULL refused caching")
	}
	p.close(fh, state.Read, false)
}

// TestSNFSLateTreatAsClosed is the model checker's seed 38070 on a real
// server (section 5.1): A caches f for reading; B's OPEN for writing calls A
// back (INVALIDATE); A closes f while the callback is out, so when the
// callback times out A holds nothing and is not fenced. A opens f again, its
// application closes it (a delayed close: no CLOSE), and only then A's answer
// to the old callback arrives, late: CB_TREAT_AS_CLOSED. The server applies
// it (it says what A holds: no open). It used to drop it and count A's open
// for ever: f stayed write-shared, and nobody could cache it again.
func TestSNFSLateTreatAsClosed(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	// The protocol's clock moves when the test says: the callback's timeout
	// and the recall back-off pass at once, and only when the test has done
	// what must come before (it was serial, timed by sleeps).
	reg, clock := metrics.New(), new(consist.OffsetClock)
	e.restartWith(func(c *server.Config) {
		c.Metrics, c.Clock = reg, clock
		c.Table.CallbackTimeout = 2 * time.Second
		if os.Getenv("TRACE") != "" {
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	})
	fh := snfsCreate(t, e, "late")
	a := verifiedProtoClient(t, e, "late-a")
	b := verifiedProtoClient(t, e, "late-b")
	c := verifiedProtoClient(t, e, "late-c")

	a.openCaching(fh, state.Read)
	release := make(chan struct{})
	called := make(chan struct{}, 1)
	a.setAnswer(func(*snfs1.CallbackArgs) state.Outcome {
		called <- struct{}{}
		<-release
		return state.TreatAsClosed
	})
	opened := make(chan *snfs1.OpenRes, 1)
	go func() {
		cx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, _, err := b.openJukeboxRetry(cx, fh, state.Write)
		if err != nil {
			t.Error(err)
		}
		opened <- res
	}()
	<-called
	a.close(fh, state.Read, false) // A holds nothing of f while its callback is out
	if res := <-opened; res == nil || res.Status != nfs3.OK {
		t.Fatalf("B's OPEN: %+v", res)
	}
	// The callback times out (2 s after it was sent, seen by the sweeper at
	// its next tick); A, holding nothing, is not fenced.
	clock.Advance(2600 * time.Millisecond)
	if !waitFor(30*time.Second, func() bool {
		return metricValue(t, reg, "snfs_server_consist_callback_outcomes_total", "outcome", "FAILED") >= 1
	}) {
		t.Fatal("the callback to A did not time out")
	}
	res, err := a.open(fh, state.Read) // A's OPEN recalls B's cache: a new back-off, and no CLOSE: a delayed close
	ok(t, "A's OPEN again", res.Status, err)
	// Every callback asked for (B's and A's) is answered once the
	// answers' round trips are all counted; A's late one is counted on A's
	// connection's reader just before it is applied, and that reader reads
	// A's next call only once it is: so a NULL of A's answered after the
	// count means the answer is applied.
	close(release) // the late CB_TREAT_AS_CLOSED, within the server's second CallbackTimeout
	if !waitFor(10*time.Second, func() bool {
		return seriesSum(t, reg, "snfs_server_consist_callback_seconds") >= seriesSum(t, reg, "snfs_server_consist_callbacks_total")
	}) {
		t.Fatal("the server did not get A's late answer")
	}
	if err := a.nfs().Call(ctx, nfs3.ProcNull, nil, nil); err != nil {
		t.Fatal(err)
	}
	b.close(fh, state.Write, false)

	clock.Advance(2300 * time.Millisecond) // the recall back-off
	res, err = c.open(fh, state.Write)
	ok(t, "C's OPEN", res.Status, err)
	if !res.CacheEnabled {
		t.Fatal("C may not cache f: the server still counts the open A handed back with its late CB_TREAT_AS_CLOSED")
	}
	c.close(fh, state.Write, false)
}

// seriesSum is the sum of every series of the counter name, or of their
// observation counts for a histogram.
func seriesSum(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n
}

// TestSNFSSmallTableBound: a table of 8 entries (--table-entries 8) admits 8
// open files, and answers the 9th OPEN NFS3ERR_JUKEBOX (section 15). It was
// split into 8 parts of one entry, each bounded on its own, and admitted 5.
func TestSNFSSmallTableBound(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.Table.MaxEntries = 8 })
	p := newProtoClient(t, e, "many-opens")
	for i := range 9 {
		fh := e.create(e.nfs, e.root, fmt.Sprintf("f%d", i), 0o644)
		res, err := p.open(fh, state.Read)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < 8 && res.Status != nfs3.OK:
			t.Fatalf("OPEN of file %d in a table of 8: %v", i+1, res.Status)
		case i == 8 && res.Status != nfs3.ErrJukebox:
			t.Fatalf("OPEN of a 9th file in a full table of 8: %v, want NFS3ERR_JUKEBOX", res.Status)
		}
	}
}

// TestSNFSRetriedOpenExemptFromBackoff: an OPEN whose callbacks outlast the
// jukebox bound is answered NFS3ERR_JUKEBOX; its retry, once the callbacks
// are done, is the open that caused the recall and is exempt from the recall
// back-off as the first attempt was (section 4.2): it gets caching. It used
// to be refused caching for the back-off's 2 s - a penalty for the other
// client's slow write-back.
func TestSNFSRetriedOpenExemptFromBackoff(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "retried")
	a := verifiedProtoClient(t, e, "slow-a")
	b := verifiedProtoClient(t, e, "retrying-b")
	a.openCaching(fh, state.Read)
	a.setAnswer(func(*snfs1.CallbackArgs) state.Outcome {
		time.Sleep(1300 * time.Millisecond) // past the jukebox bound (1 s)
		return state.OK
	})
	res, err := b.open(fh, state.Write)
	if err != nil || res.Status != nfs3.ErrJukebox {
		t.Fatalf("B's first OPEN: %v %v, want NFS3ERR_JUKEBOX while A writes back", err, res.Status)
	}
	a.close(fh, state.Read, false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if res, err = b.open(fh, state.Write); err != nil {
			t.Fatal(err)
		}
		if res.Status != nfs3.ErrJukebox || time.Now().After(deadline) {
			break
		}
	}
	ok(t, "B's retried OPEN", res.Status, err)
	if !res.CacheEnabled {
		t.Fatal("B's retried OPEN, the open that caused the recall, was refused caching by the recall back-off")
	}
	b.close(fh, state.Write, false)
}

// TestSNFSLastWriterAnswers: a last writer with no open left (CLOSED_DIRTY)
// called back with CB_WRITEBACK may answer CB_OK (it wrote back; it keeps its
// clean cache, checked by version at its next OPEN), CB_TREAT_AS_CLOSED or
// CB_STALE (it held nothing more); each clears its last-writer record and
// nothing else (section 5.1): the next opener calls it back no more, and the
// version is the one its write open took.
func TestSNFSLastWriterAnswers(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := verifiedProtoClient(t, e, "writer-a")
	b := verifiedProtoClient(t, e, "reader-b")
	c := verifiedProtoClient(t, e, "writer-c")
	for _, answer := range []state.Outcome{state.OK, state.TreatAsClosed, state.Stale} {
		fh := snfsCreate(t, e, "last-"+answer.String())
		wr := a.openCaching(fh, state.Write)
		a.close(fh, state.Write, true) // CLOSED_DIRTY: A is the last writer
		before := len(a.got())
		a.setAnswer(func(*snfs1.CallbackArgs) state.Outcome { return answer })
		rd := b.openOrFatal(t, fh, state.Read)
		cbs := a.got()[before:]
		if len(cbs) != 1 || cbs[0].Mode != state.Writeback {
			t.Fatalf("%v: A's callbacks for B's OPEN: %+v, want one CB_WRITEBACK", answer, cbs)
		}
		if !rd.CacheEnabled || rd.CacheVersion != wr.CacheVersion || rd.OldCacheVersion != wr.CacheVersion {
			t.Fatalf("%v: B's OPEN %+v, want caching at A's version %d", answer, rd.OpenOK, wr.CacheVersion)
		}
		b.close(fh, state.Read, false)
		wc := c.openOrFatal(t, fh, state.Write)
		if n := len(a.got()) - before; n != 1 {
			t.Fatalf("%v: A was called back again after answering (%d callbacks): its last-writer record stayed", answer, n)
		}
		if !wc.CacheEnabled {
			t.Fatalf("%v: C's OPEN for writing refused caching: %+v", answer, wc.OpenOK)
		}
		c.close(fh, state.Write, false)
		a.setAnswer(nil)
	}
}

// TestSNFSCloseDirtyNoOpen: a CLOSE with dirty = TRUE that matches no open is
// answered SNFS1_OK and changes nothing (section 4.4): it removes no open, and
// it does not make its client a last writer (only a caching OPEN_WRITE or a
// RECLAIM does), so nobody calls it back for data.
func TestSNFSCloseDirtyNoOpen(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "no-open")
	a := verifiedProtoClient(t, e, "closer-a")
	b := verifiedProtoClient(t, e, "opener-b")
	a.close(fh, state.Write, true) // never opened
	b.openOrFatal(t, fh, state.Read)
	b.close(fh, state.Read, false)
	if cbs := a.got(); len(cbs) != 0 {
		t.Fatalf("a client that never opened the file was called back: %+v", cbs)
	}
	// With a read open: a CLOSE of a write open it does not have, dirty.
	a.openCaching(fh, state.Read)
	a.close(fh, state.Write, true)
	b.openOrFatal(t, fh, state.Write)
	cbs := a.got()
	if len(cbs) != 1 || cbs[0].Mode != state.Invalidate {
		t.Fatalf("A's callbacks: %+v, want one CB_INVALIDATE: its read open was kept, and it is no last writer", cbs)
	}
	b.close(fh, state.Write, false)
	a.close(fh, state.Read, false)
}

// TestSNFSDiscovery: on one connection a client may call SNFS NULL (to learn
// whether the server speaks the protocol), and NFSv3 calls, before REGISTER
// (section 2); the calls before REGISTER are a plain client's, and REGISTER
// makes that connection its callback path: the CB_NULL probe comes on it.
func TestSNFSDiscovery(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "discovered")
	probed := make(chan struct{}, 1)
	cb := &sunrpc.Program{Name: "snfs_cb", Number: snfs1.CBProgram, Versions: map[uint32][]sunrpc.Proc{snfs1.CBVersion: {
		snfs1.CBProcNull:     {Name: "CB_NULL", Handler: nullAnswerer(0, probed)},
		snfs1.CBProcCallback: {Name: "CB_CALLBACK", Handler: func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }},
	}}}
	c, err := sunrpc.Dial(ctx, "tcp", e.addr, snfs1.Program, snfs1.Version, sunrpc.WithPrograms(cb))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(ctx, snfs1.ProcNull, nil, nil); err != nil {
		t.Fatalf("SNFS NULL before REGISTER: %v", err)
	}
	var gres nfs3.GetattrRes
	if err := c.Program(nfs3.Program, nfs3.Version).Call(ctx, nfs3.ProcGetattr, &nfs3.FHArgs{FH: fh}, &gres); err != nil || gres.Status != nfs3.OK {
		t.Fatalf("GETATTR before REGISTER: %v %v", err, gres.Status)
	}
	var reg snfs1.RegisterRes
	err = c.Call(ctx, snfs1.ProcRegister, &snfs1.RegisterArgs{Name: []byte("discoverer"), ClientVerf: snfs1.Verifier{1}}, &reg)
	ok(t, "REGISTER after NULL", reg.Status, err)
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("no CB_NULL probe on the connection that registered after NULL")
	}
	var res snfs1.OpenRes
	err = c.Call(ctx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: reg.Client, File: fh, Mode: state.Read}, &res)
	ok(t, "OPEN", res.Status, err)
	if !res.CacheEnabled {
		t.Fatal("OPEN after the probe was answered refused caching")
	}
}

// TestSNFSVersionAfterReclaim: after a restart, a reclaimed file's version is
// the highest version its clients reported (section 4.5): an OPEN for reading
// returns it in both fields, so caches of it stay valid; an OPEN_WRITE takes a
// fresh version, above every version issued before the restart, and returns
// the reclaimed one as old_cache_version. A file nobody reclaimed gets a fresh
// version at its next OPEN, returned in both fields.
func TestSNFSVersionAfterReclaim(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	rd, wr, other := snfsCreate(t, e, "reclaimed-read"), snfsCreate(t, e, "reclaimed-write"), snfsCreate(t, e, "not-reclaimed")
	g := dialGrace(t, e, "reclaimer", make(cbRecorder, 16))
	g.openItems(t, state.Read, rd)
	g.openItems(t, state.Write, wr)
	vr, vw := g.items[0].Version, g.items[1].Version
	q := verifiedProtoClient(t, e, "before")
	vo := q.openOrFatal(t, other, state.Write).CacheVersion
	q.close(other, state.Write, false)
	var ures snfs1.UnregisterRes
	err := q.rpc.Call(ctx, snfs1.ProcUnregister, &snfs1.UnregisterArgs{Client: q.id}, &ures)
	ok(t, "UNREGISTER", ures.Status, err) // so that grace waits only for g
	highest := max(vr, vw, vo)

	restartGrace(e, 20*time.Second)
	if g.comeBack(t) {
		t.Fatal("the reclaim was refused")
	}
	if r := waitGrace(t, e); r.Reason != consist.GraceAllReclaimed {
		t.Fatalf("grace: %+v", r)
	}
	p := verifiedProtoClient(t, e, "after")
	res := p.openOrFatal(t, rd, state.Read)
	if res.CacheVersion != vr || res.OldCacheVersion != vr {
		t.Errorf("OPEN for reading of a reclaimed file: versions %d, %d; want the reclaimed %d twice", res.CacheVersion, res.OldCacheVersion, vr)
	}
	res = p.openOrFatal(t, wr, state.Write)
	if res.CacheVersion <= highest || res.OldCacheVersion != vw {
		t.Errorf("OPEN_WRITE of a reclaimed file: versions %d, %d; want a fresh one above %d, and the reclaimed %d", res.CacheVersion, res.OldCacheVersion, highest, vw)
	}
	res = p.openOrFatal(t, other, state.Read)
	if res.CacheVersion <= highest || res.OldCacheVersion != res.CacheVersion {
		t.Errorf("OPEN of a file nobody reclaimed: versions %d, %d; want a fresh one above %d, twice", res.CacheVersion, res.OldCacheVersion, highest)
	}
}
