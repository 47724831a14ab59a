package tests

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount3"
	"snfs/nfs3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// callRecord encodes one NFS call with AUTH_NONE, record mark included.
func callRecord(xid, proc uint32, args xdr.Encoder) []byte {
	w := xdr.NewWriter(nil)
	w.Uint32(0)
	sunrpc.EncodeCall(w, &sunrpc.CallHeader{XID: xid, Prog: nfs3.Program, Vers: nfs3.Version, Proc: proc, Cred: noneAuth, Verf: noneAuth})
	if args != nil {
		args.Encode(w)
	}
	b := w.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-4)|1<<31)
	return b
}

// pipelineNoRead opens a connection that writes rec over and over and never
// reads a reply, until stop is closed; then it closes the connection.
func pipelineNoRead(t *testing.T, addr string, rec []byte, stop <-chan struct{}) <-chan struct{} {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]byte, 0, 32*len(rec))
	for range 32 {
		batch = append(batch, rec...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer nc.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			nc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := nc.Write(batch); err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					return
				}
			}
		}
	}()
	return done
}

func serverHeap() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestStalledClientCannotStallOthers is the attack of issue 12: connections that
// pipeline NFS NULL calls with AUTH_NONE, or 1 MiB READs, and never read their
// replies. Meanwhile another client's MNT, stable WRITE, SETATTR and COMMIT
// each complete promptly, the server's memory stays bounded, and it returns to
// its idle level once those connections go.
func TestStalledClientCannotStallOthers(t *testing.T) {
	// Serial (no t.Parallel): it measures the process's heap.
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("big"), make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	big := e.lookup(e.root, "big")
	fh := e.create(e.nfs, e.root, "victim", 0o644)
	idle := serverHeap()

	stop := make(chan struct{})
	var floods []<-chan struct{}
	for range 2 {
		floods = append(floods, pipelineNoRead(t, e.addr, callRecord(1, nfs3.ProcNull, nil), stop))
		floods = append(floods, pipelineNoRead(t, e.addr, callRecord(2, nfs3.ProcRead, &nfs3.ReadArgs{File: big, Count: 1 << 20}), stop))
	}
	defer func() {
		close(stop)
		for _, f := range floods {
			<-f
		}
	}()
	time.Sleep(time.Second) // let them fill every buffer they can

	m, err := client.DialMount(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var peak uint64
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		mnt, err := m.Mnt(cctx, e.cfg.Exports[0].Path)
		if err != nil || mnt.Status != mount3.OK {
			t.Fatalf("MNT: %v %v", err, mnt.Status)
		}
		w, err := e.nfs.Write(cctx, fh, uint64(i)*4, []byte("data"), nfs3.FileSync)
		ok(t, "WRITE FILE_SYNC", w.Status, err)
		mode := uint32(0o600 + i%2)
		sa, err := e.nfs.Setattr(cctx, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Mode: &mode}})
		ok(t, "SETATTR", sa.Status, err)
		cm, err := e.nfs.Commit(cctx, fh, 0, 0)
		ok(t, "COMMIT", cm.Status, err)
		cancel()
		slowest = max(slowest, time.Since(start))
		if i%5 == 0 {
			peak = max(peak, serverHeap())
		}
	}
	t.Logf("slowest MNT+WRITE+SETATTR+COMMIT round under the floods: %v", slowest)
	// Four stalled connections, each held to its budget (16 MiB by default,
	// counted by capacity), plus buffers the pool keeps until the next
	// collections. Before the budget, this grew to about 1 GiB.
	if grown := int64(peak) - int64(idle); grown > 128<<20 {
		t.Errorf("server heap grew by %d MiB under the floods", grown>>20)
	}

	close(stop)
	for _, f := range floods {
		<-f
	}
	stop = make(chan struct{})
	floods = nil
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := serverHeap()
		if int64(now)-int64(idle) < 16<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server heap %d MiB above idle 30 s after the floods closed", (int64(now)-int64(idle))>>20)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
