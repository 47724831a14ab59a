package tests

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"snfs/consist"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
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
	a.openCaching(fh, snfs1.Write)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	a.setAnswer(func(*snfs1.CallbackArgs) snfs1.CallbackStatus { <-block; return snfs1.CBOK })
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := b.open(fh, snfs1.Write)
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
	if err := a.rpc.Call(ctx, snfs1.ProcClose, &snfs1.CloseArgs{Client: id, File: fh, Mode: snfs1.Write}, &cres); err != nil || cres.Status != snfs1.ErrFenced {
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

	b.close(fh, snfs1.Write, false)
	res, err := a.open(fh, snfs1.Write)
	ok(t, "OPEN again by the fenced client", res.Status, err)
	var commit nfs3.CommitRes
	if err := a.nfs().Call(ctx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &commit); err != nil || commit.Status != nfs3.OK {
		t.Errorf("COMMIT after the new OPEN: %v %v, want OK", err, commit.Status)
	}
}

var _ = state.Read

// TestSNFSFailedMountUnregisters: a mount in snfs mode whose MNT fails (an
// unknown export) UNREGISTERs the registration it made, so the server's next
// restart does not wait its grace period for a client that never comes back
// (section 4.7); it used to leave it behind (clients_lost=1, writes stalled).
func TestSNFSFailedMountUnregisters(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	_, err := vfs.OpenSNFS(ctx, vfs.SNFSMountConfig{Addr: e.addr, Export: "/no/such/export", Name: "host:/mnt/failed",
		CacheDir: diskTempDir(t, "snfs-cache-"), Logger: quietLogger()})
	if err == nil {
		t.Fatal("a mount of an unknown export succeeded")
	}
	restartGrace(e, 30*time.Second)
	if g := waitGrace(t, e); g.Expected != 0 || g.Reason != consist.GraceNone {
		t.Fatalf("after a failed mount the restarted server expects %d clients (grace %q), want none", g.Expected, g.Reason)
	}
}
