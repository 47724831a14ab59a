package tests

import (
	"context"
	"testing"
	"time"

	"snfs/internal/faultproxy"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// TestSNFSOldInstanceCallAfterRestart: a protocol client restarts (a new
// boot verifier under its name, docs/protocol.md 4.1) while a call its old
// instance sent is still on its way to the server: here the first step of
// a write-back, a SETATTR of the size of a file the old instance had open
// for writing, held in the network. Once the new instance has REGISTERed,
// that call must not be applied as a plain NFSv3 client's change: that
// dropped the file's version, so the new instance's reintegration (its
// OPEN's old_cache_version, section 9) could not tell its own cut-off
// write-back from another client's change, and kept the acknowledged data
// as a conflict copy beside the truncated file (found by TestPermitsSoak
// behind a 1 ms link: the mount was killed during a write-back). The
// server ends the old instance's connections, and the calls they were
// serving, before it forgets the old registration.
func TestSNFSOldInstanceCallAfterRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "old-instance")
	data := []byte("the file's bytes before the restart")
	wres, err := e.nfs.Write(ctx, fh, 0, data, nfs3.FileSync)
	ok(t, "WRITE", wres.Status, err)

	null := func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }
	var v1, v2 snfs1.Verifier
	copy(v1[:], "first boot")
	copy(v2[:], "second boot")
	p := newProxy(t, e.addr)
	old := newProtoClientAt(t, p.Addr(), "restarting", v1, null)
	r1 := old.openCaching(fh, state.Write)

	p.Stall(faultproxy.ClientToServer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		zero := uint64(0)
		var res nfs3.WccRes
		cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		old.nfs().Call(cx, nfs3.ProcSetattr, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Size: &zero}}, &res)
	}()
	time.Sleep(200 * time.Millisecond) // the SETATTR waits in the proxy
	old.dead.Store(true)               // killed: its client connects no more
	restarted := newProtoClientAt(t, e.addr, "restarting", v2, null)
	p.Restore(faultproxy.ClientToServer)
	select {
	case <-done:
	case <-time.After(2 * time.Second): // applied or not by now
	}

	r2, err := restarted.open(fh, state.Write)
	ok(t, "OPEN", r2.Status, err)
	if r2.OldCacheVersion != r1.CacheVersion {
		t.Errorf("the new instance's OPEN for writing: old_cache_version %d; want the old instance's version %d "+
			"(nobody else changed the file: the old instance's late call dropped it)", r2.OldCacheVersion, r1.CacheVersion)
	}
	g, err := e.nfs.Getattr(ctx, fh)
	ok(t, "GETATTR", g.Status, err)
	if g.Attr.Size != uint64(len(data)) {
		t.Errorf("size after the restart: %d; want %d (the old instance's call, sent before its restart, was applied after it)", g.Attr.Size, len(data))
	}
}
