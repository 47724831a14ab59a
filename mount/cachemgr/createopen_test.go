package cachemgr

import (
	"context"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// TestCreateOpenTrusted: what of a CREATE_OPEN's reply its open may be
// applied from (docs/protocol.md 4.21), with a real session's callbacks: a
// callback about the file that began while the call was out and handed the
// open back (CB_STALE: this client held nothing it knew of) voids it, one
// about another file does not; a reply of another server instance (its boot
// verifier) is void.
func TestCreateOpenTrusted(t *testing.T) {
	ctx := context.Background()
	addr, exp := testServer(t)
	v := quietMount(t, addr, exp, "createopen-trusted", 0)
	sn := mgrOf(v)
	made := nfs3.FH{1, 2, 3, 4, 5, 6, 7, 8}
	other := nfs3.FH{8, 7, 6, 5, 4, 3, 2, 1}
	reply := func() *createOpened {
		co := sn.createOpens.begin(sn.AttrStart())
		co.open = snfs1.OpenRes{OpenOK: snfs1.OpenOK{CacheVersion: 3, OldCacheVersion: 3, CacheEnabled: true}}
		co.verf = sn.sess.ServerVerifier()
		return co
	}

	co := reply()
	if out := sn.Callback(ctx, made, state.WritebackInvalidate, nil); out != state.Stale {
		t.Fatalf("callback about a file held nothing of: %v; want CB_STALE", out)
	}
	if ok := co.trusted(ctx, sn, made); ok != nil {
		t.Fatalf("the open a CB_STALE handed back was applied: %+v", ok)
	}

	co = reply()
	sn.Callback(ctx, other, state.WritebackInvalidate, nil)
	if ok := co.trusted(ctx, sn, made); ok == nil || !ok.CacheEnabled {
		t.Fatalf("a callback about another file voided the open (%+v)", ok)
	}

	co = reply()
	co.verf[0] ^= 0xff
	if ok := co.trusted(ctx, sn, made); ok != nil {
		t.Fatal("the open of a reply from another server instance was applied")
	}

	// Nothing is left noted once they ended: a callback now is not waited for.
	if len(sn.createOpens.live) != 0 {
		t.Fatalf("%d CREATE_OPENs still noted", len(sn.createOpens.live))
	}
	// And a real create takes its open from the reply: no OPEN.
	before := sn.stats.CreateOpened.Load()
	_, f, err := v.Create(ctx, v.Root(), vfs.Cred{}, "f", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if n := sn.stats.CreateOpened.Load() - before; n != 1 {
		t.Fatalf("creates opened by their CREATE_OPEN: %d; want 1", n)
	}
}
