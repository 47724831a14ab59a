package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"snfs/state"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/store"
)

// TestServerMaxInFlight: the server's worker bound (server.Config.MaxInFlight)
// holds. With MaxInFlight 2, at most two calls may execute at once: here six
// stable WRITEs to six files on six connections, each held in its flush by a
// blocking Sync, must not all be executing together.
func TestServerMaxInFlight(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	const calls, bound = 6, 2
	var blocking atomic.Bool
	var in, most atomic.Int32
	release := make(chan struct{})
	e.cfg.Sync = func(*store.Node, bool) error {
		if !blocking.Load() {
			return nil
		}
		n := in.Add(1)
		defer in.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return nil
	}
	e.restartWith(func(c *server.Config) { c.MaxInFlight = bound })
	fhs := make([]nfs3.FH, calls)
	conns := make([]*client.NFS, calls)
	for i := range fhs {
		fhs[i] = snfsCreate(t, e, "inflight"+string(rune('a'+i)))
		c, err := client.DialNFS(ctx, "tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	blocking.Store(true)
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range fhs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := conns[i].Write(cx, fhs[i], 0, []byte("x"), nfs3.FileSync)
			if err == nil && res.Status != nfs3.OK && res.Status != nfs3.ErrJukebox {
				err = res.Status
			}
			errs <- err
		}()
	}
	// The bound is reached first (else the check below holds trivially)...
	for deadline := time.Now().Add(30 * time.Second); in.Load() < bound; {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("only %d calls reached their flush; want %d", in.Load(), bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ...then long enough for every call to reach its flush if nothing bounds them.
	for deadline := time.Now().Add(2 * time.Second); in.Load() <= bound && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("WRITE: %v", err)
		}
	}
	if m := most.Load(); m > bound {
		t.Errorf("%d calls executed at once with MaxInFlight = %d", m, bound)
	}
}

// TestSNFSCallbackWritebackNoDeadlock: a called-back client writes back a lot
// (64 MiB, UNSTABLE WRITEs of 1 MiB four at a time, then COMMIT) from inside its
// callback handler while the OPEN that called it back, and 150 more OPENs of the
// file by three other clients, wait. Parked OPENs must not hold server workers
// (the deadlock of the paper's section 4.3.4): the write-back completes, every
// OPEN succeeds within 60 s (NFS3ERR_JUKEBOX is retried), and the file holds
// exactly the written data.
//
// The server's worker bound is 4 (server.Config.MaxInFlight), and the 150
// extra OPENs would exceed even the default pool. JukeboxAfter (40 s) is above
// CallbackTimeout (30 s): if
// parked OPENs held workers, the write-back could not go on until the
// callback timed out, and the writer would be fenced (its WRITEs refused)
// rather than the stall hidden by JUKEBOX answers freeing workers.
func TestSNFSCallbackWritebackNoDeadlock(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.Table.CallbackTimeout = 30 * time.Second
	e.cfg.Table.JukeboxAfter = 40 * time.Second
	e.restartWith(func(c *server.Config) { c.MaxInFlight = 4 })

	const (
		size      = 64 << 20
		chunk     = 1 << 20
		inFlight  = 4
		openers   = 3
		perOpener = 50
	)
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{13}).Read(data)
	want := sha256.Sum256(data)

	fh := snfsCreate(t, e, "big")
	a := newProtoClient(t, e, "writer-a")
	b := newProtoClient(t, e, "opener-b")
	others := make([]*protoClient, openers)
	for i := range others {
		others[i] = newProtoClient(t, e, "opener-"+string(rune('c'+i)))
	}
	a.openCaching(fh, state.Write)

	cx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sent sync.WaitGroup // every extra OPEN has been sent once
	sent.Add(openers * perOpener)
	allSent := make(chan struct{})
	go func() { sent.Wait(); close(allSent) }()

	var wrote atomic.Bool
	a.setAnswer(func(args *snfs1.CallbackArgs) state.Outcome {
		if !args.Mode.WritesBack() || wrote.Swap(true) {
			return state.OK
		}
		select { // let the OPENs reach the server and park
		case <-allSent:
			time.Sleep(200 * time.Millisecond)
		case <-cx.Done():
		}
		nfs := a.nfs()
		var verf [nfs3.WriteVerfSize]byte
		var vmu sync.Mutex
		sem := make(chan struct{}, inFlight)
		var wg sync.WaitGroup
		for off := 0; off < size; off += chunk {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				var res nfs3.WriteRes
				err := nfs.Call(cx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: uint64(off), Count: chunk,
					Stable: nfs3.Unstable, Data: data[off : off+chunk]}, &res)
				if err != nil || res.Status != nfs3.OK || res.Count != chunk {
					t.Errorf("write-back WRITE at %d: %v %v count %d", off, err, snfs1.StatusName(res.Status), res.Count)
					return
				}
				vmu.Lock()
				verf = res.Verf
				vmu.Unlock()
			}()
		}
		wg.Wait()
		var cres nfs3.CommitRes
		err := nfs.Call(cx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &cres)
		if err != nil || cres.Status != nfs3.OK {
			t.Errorf("write-back COMMIT: %v %v", err, snfs1.StatusName(cres.Status))
		} else if cres.Verf != verf {
			t.Errorf("the write verifier changed during the write-back")
		}
		return state.OK
	})

	start := time.Now()
	type result struct {
		res       *snfs1.OpenRes
		jukeboxes int
		err       error
	}
	bres := make(chan result, 1)
	go func() {
		r, j, err := b.openJukeboxRetry(cx, fh, state.Read)
		bres <- result{r, j, err}
	}()
	var owg sync.WaitGroup
	var oerrs atomic.Int32
	for _, o := range others {
		for range perOpener {
			owg.Add(1)
			go func() {
				defer owg.Done()
				sent.Done()
				if _, _, err := o.openJukeboxRetry(cx, fh, state.Read); err != nil {
					if oerrs.Add(1) == 1 {
						t.Errorf("an extra OPEN: %v", err)
					}
				}
			}()
		}
	}
	r := <-bres
	owg.Wait()
	t.Logf("B's OPEN took %v (%d NFS3ERR_JUKEBOX first); %d of %d extra OPENs failed", time.Since(start), r.jukeboxes, oerrs.Load(), openers*perOpener)
	if r.err != nil {
		t.Fatalf("B's OPEN: %v", r.err)
	}
	if !wrote.Load() {
		t.Fatalf("A was never asked to write back: callbacks %+v", a.got())
	}
	if cbs := a.got(); len(cbs) != 1 || cbs[0].Mode != state.WritebackInvalidate {
		t.Errorf("A's callbacks: %+v, want one WRITEBACK_INVALIDATE", cbs)
	}
	if r.res.CacheEnabled {
		t.Errorf("B may cache a write-shared file")
	}
	if r.res.Attr == nil || r.res.Attr.Size != size {
		t.Errorf("B's OPEN attributes do not show A's write-back: %+v", r.res.Attr)
	}
	got, err := os.ReadFile(e.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(got); len(got) != size || !bytes.Equal(sum[:], want[:]) {
		t.Fatalf("the file holds %d bytes (sha256 %x), want A's %d bytes (sha256 %x)", len(got), sum, size, want)
	}
}
