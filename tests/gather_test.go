package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/gather"
	"snfs/nfs3"
	"snfs/server"
	"snfs/store"
	"snfs/sunrpc"
)

// durability records, for every flush, what the file held when the flush began
// (which is exactly what the flush makes durable) and when it returned, on a
// sequence shared with the client's reply receipts. It can also fail flushes.
type durability struct {
	mu      sync.Mutex
	seq     atomic.Int64
	flushes []flushRecord
	failN   atomic.Int64 // fail this many next flushes
	delay   time.Duration
	began   atomic.Int64 // flushes of the file under test begun
	// path names the file under test; set once it exists (setPath). Flushes of
	// other objects, or before it is set, are passed through.
	path atomic.Pointer[string]
}

func (d *durability) setPath(p string) { d.path.Store(&p) }

// waitFlushing waits (bounded) until n flushes of the file under test have
// begun.
func (d *durability) waitFlushing(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.began.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushes began, want %d", d.began.Load(), n)
		}
	}
}

type flushRecord struct {
	snapshot []byte
	done     int64 // sequence number when the flush returned
	failed   bool
}

func (d *durability) hook(n *store.Node, dataOnly bool) error {
	path := d.path.Load()
	if path == nil || n.Stat.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return store.SyncNode(n, dataOnly) // a directory flush, not under test
	}
	snap := readAll(*path)
	d.began.Add(1)
	time.Sleep(d.delay)
	var err error
	failed := false
	if d.failN.Load() > 0 && d.failN.Add(-1) >= 0 {
		err, failed = syscall.EIO, true
	} else {
		err = store.SyncNode(n, dataOnly)
	}
	d.mu.Lock()
	d.flushes = append(d.flushes, flushRecord{snapshot: snap, done: d.seq.Add(1), failed: failed})
	d.mu.Unlock()
	return err
}

// coveredBefore reports whether a successful flush that returned at or before seq
// held data at off.
func (d *durability) coveredBefore(seq int64, off int, data []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.flushes {
		if f.done <= seq && !f.failed && len(f.snapshot) >= off+len(data) && bytes.Equal(f.snapshot[off:off+len(data)], data) {
			return true
		}
	}
	return false
}

// readAll returns a file's content (nil if it cannot be read).
func readAll(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func newGatherEnv(t *testing.T, mode gather.Mode, d *durability) *env {
	t.Helper()
	requireRoot(t)
	return newEnvWith(t, "rw,no_root_squash", func(c *server.Config) {
		c.WriteGather, c.GatherMaxWait = mode, 2*time.Millisecond
		if d != nil {
			c.Sync = d.hook
		}
	})
}

// pattern is the content every writer writes at absolute offset o, so that any
// interleaving of writes leaves the same bytes.
func pattern(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := uint32(off+i) * 2654435761
		b[i] = byte(x >> 24)
	}
	return b
}

// TestGatherConcurrentCorrectness: 16 writers on one file and 16 on separate files,
// random offsets and sizes, FILE_SYNC and DATA_SYNC mixed; every byte reads back.
func TestGatherConcurrentCorrectness(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	for _, mode := range []gather.Mode{gather.Adaptive, gather.On, gather.Off} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newGatherEnv(t, mode, nil)
			shared := e.create(e.nfs, e.root, "shared", 0o644)
			const size = 1 << 20
			var wg sync.WaitGroup
			written := make([][]bool, 32) // per writer: the bytes it wrote
			files := make([]string, 32)
			for w := 0; w < 32; w++ {
				fh, name := shared, "shared"
				if w >= 16 {
					name = fmt.Sprintf("own%d", w)
					fh = e.create(e.nfs, e.root, name, 0o644)
				}
				files[w], written[w] = name, make([]bool, size)
				wg.Add(1)
				go func(w int, fh nfs3.FH, mark []bool) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(w)))
					c, err := client.DialNFS(ctx, "tcp", e.addr)
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					for i := 0; i < 40; i++ {
						n := 1 + rng.Intn(64<<10)
						off := rng.Intn(size - n)
						stable := nfs3.FileSync
						if rng.Intn(2) == 0 {
							stable = nfs3.DataSync
						}
						res, err := c.Write(ctx, fh, uint64(off), pattern(off, n), stable)
						if err != nil || res.Status != nfs3.OK || res.Committed < stable || res.Count != uint32(n) {
							t.Errorf("WRITE: %v %+v", err, res)
							return
						}
						for j := off; j < off+n; j++ {
							mark[j] = true
						}
					}
				}(w, fh, written[w])
			}
			wg.Wait()
			for w, mark := range written {
				name := files[w]
				got := readAll(e.path(name))
				for j, m := range mark {
					if m && (j >= len(got) || got[j] != pattern(j, 1)[0]) {
						t.Fatalf("%s: byte %d wrong", name, j)
					}
				}
			}
			st := e.srv.GatherStats(e.dir)
			t.Logf("%v: %d requests, %d flushes, waited %v", mode, st.Requests, st.Batches, st.Wait)
		})
	}
}

// TestGatherOrdering: no stable WRITE reply arrives before a flush that covered its
// data has returned; and gathering actually batches concurrent writers.
func TestGatherOrdering(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	d := &durability{delay: time.Millisecond}
	e := newGatherEnv(t, gather.Adaptive, d)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	d.setPath(e.path("f"))
	const writers, per, chunk = 16, 20, 4096
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				off := (w*per + i) * chunk
				data := make([]byte, chunk)
				rand.Read(data)
				res, err := e.nfs.Write(ctx, fh, uint64(off), data, nfs3.FileSync)
				seq := d.seq.Load() // flushes that had returned when the reply arrived
				if err != nil || res.Status != nfs3.OK {
					t.Errorf("WRITE: %v %v", err, res.Status)
					return
				}
				if !d.coveredBefore(seq, off, data) {
					t.Errorf("reply for offset %d arrived before any flush covered it", off)
				}
			}
		}(w)
	}
	wg.Wait()
	st := e.srv.GatherStats(e.dir)
	if st.Requests != writers*per || st.Batches*2 > st.Requests {
		t.Fatalf("%d stable writes took %d flushes (want fewer than half)", st.Requests, st.Batches)
	}
	t.Logf("%d writes, %d flushes", st.Requests, st.Batches)
}

// TestGatherFlushFailure: a failed flush fails every write it covered and changes
// the write verifier; writes reported OK were covered by a successful flush.
func TestGatherFlushFailure(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	d := &durability{delay: 2 * time.Millisecond}
	e := newGatherEnv(t, gather.Adaptive, d)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	d.setPath(e.path("f"))
	before := e.srv.Verifier()
	d.failN.Store(1)
	var wg sync.WaitGroup
	var failed, succeeded atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(w + 1)}, 4096)
			res, err := e.nfs.Write(ctx, fh, uint64(w*4096), data, nfs3.FileSync)
			seq := d.seq.Load()
			switch {
			case err != nil:
				t.Error(err)
			case res.Status == nfs3.ErrIO:
				failed.Add(1)
			case res.Status == nfs3.OK:
				succeeded.Add(1)
				if !d.coveredBefore(seq, w*4096, data) {
					t.Errorf("write %d reported OK without a successful flush covering it", w)
				}
			default:
				t.Errorf("status %v", res.Status)
			}
		}(w)
	}
	wg.Wait()
	if failed.Load() == 0 {
		t.Fatal("no write saw the failed flush")
	}
	if e.srv.Verifier() == before {
		t.Fatal("write verifier unchanged after a failed flush")
	}
	// The failed batch is exactly the writes that failed.
	d.mu.Lock()
	nfail := 0
	for _, f := range d.flushes {
		if f.failed {
			nfail++
		}
	}
	d.mu.Unlock()
	if nfail != 1 {
		t.Fatalf("%d failed flushes", nfail)
	}
	t.Logf("%d writes failed with the flush, %d succeeded", failed.Load(), succeeded.Load())
}

// TestGatherDuplicate: the same xid retransmitted while the write is being gathered
// is not executed twice and both copies get the same reply.
func TestGatherDuplicate(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	d := &durability{delay: 300 * time.Millisecond}
	e := newGatherEnv(t, gather.Adaptive, d)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	d.setPath(e.path("f"))
	args := &nfs3.WriteArgs{File: fh, Offset: 0, Count: 5, Stable: nfs3.FileSync, Data: []byte("hello")}
	xid := e.nfs.NextXID()
	var first, second nfs3.WriteRes
	done := make(chan error, 1)
	go func() { done <- e.nfs.CallXID(ctx, xid, nfs3.ProcWrite, args, &first) }()
	d.waitFlushing(t, 1) // the first copy is being flushed
	c2, err := sunrpc.Dial(ctx, "tcp", e.addr, nfs3.Program, nfs3.Version, sunrpc.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := (&client.NFS{Client: c2}).CallXID(cctx, xid, nfs3.ProcWrite, args, &second); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if first.Status != nfs3.OK || first.Count != second.Count || first.Verf != second.Verf || first.Status != second.Status {
		t.Fatalf("replies differ: %+v / %+v", first, second)
	}
	if st := e.srv.GatherStats(e.dir); st.Requests != 1 {
		t.Fatalf("the write was executed %d times", st.Requests)
	}
}

// TestGatherLoneWriter: a client with one write in flight at a time is never
// delayed: the server's own recorded gathering wait stays zero.
func TestGatherLoneWriter(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	e := newGatherEnv(t, gather.Adaptive, nil)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	for i := 0; i < 300; i++ {
		stable := nfs3.FileSync
		if i%3 == 0 {
			stable = nfs3.DataSync
		}
		res, err := e.nfs.Write(ctx, fh, uint64(i*8192), pattern(i*8192, 8192), stable)
		ok(t, "WRITE", res.Status, err)
		if i%50 == 0 {
			cm, err := e.nfs.Commit(ctx, fh, 0, 0)
			ok(t, "COMMIT", cm.Status, err)
		}
	}
	st := e.srv.GatherStats(e.dir)
	if st.Wait != 0 || st.Batches != st.Requests {
		t.Fatalf("lone writer: waited %v, %d flushes for %d requests", st.Wait, st.Batches, st.Requests)
	}
}

// TestGatherCommits: concurrent COMMITs of one file share flushes.
func TestGatherCommits(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	d := &durability{delay: 20 * time.Millisecond}
	e := newGatherEnv(t, gather.Adaptive, d)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	d.setPath(e.path("f"))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w, err := e.nfs.Write(ctx, fh, uint64(i*4096), pattern(i*4096, 4096), nfs3.Unstable)
			ok(t, "WRITE", w.Status, err)
			c, err := e.nfs.Commit(ctx, fh, 0, 0)
			ok(t, "COMMIT", c.Status, err)
			if !d.coveredBefore(d.seq.Load(), i*4096, pattern(i*4096, 4096)) {
				t.Errorf("COMMIT %d replied before its data was flushed", i)
			}
		}(i)
	}
	wg.Wait()
	st := e.srv.GatherStats(e.dir)
	if st.Requests != 8 || st.Batches >= 8 {
		t.Fatalf("8 concurrent COMMITs took %d flushes", st.Batches)
	}
}

// TestJukeboxOnStalledFlush: a stable WRITE whose flush is stalled beyond the bound
// gets NFS3ERR_JUKEBOX instead of holding a worker; the JUKEBOX reply is not cached,
// so the client's retry with the same xid is executed and succeeds.
func TestJukeboxOnStalledFlush(t *testing.T) {
	// Serial (no t.Parallel): it counts how writes arriving together were batched.
	requireRoot(t)
	d := &durability{delay: 700 * time.Millisecond}
	e := newEnvWith(t, "rw,no_root_squash,async", func(c *server.Config) { c.Sync, c.JukeboxAfter = d.hook, 100*time.Millisecond })
	fh := e.create(e.nfs, e.root, "f", 0o644)
	d.setPath(e.path("f"))
	leader := make(chan *nfs3.WriteRes, 1)
	go func() {
		res, err := e.nfs.Write(ctx, fh, 0, []byte("first"), nfs3.FileSync)
		if err != nil {
			t.Error(err)
		}
		leader <- res
	}()
	d.waitFlushing(t, 1) // the first write is being flushed
	args := &nfs3.WriteArgs{File: fh, Offset: 8, Count: 6, Stable: nfs3.FileSync, Data: []byte("second")}
	xid := e.nfs.NextXID()
	var res nfs3.WriteRes
	if err := e.nfs.CallXID(ctx, xid, nfs3.ProcWrite, args, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != nfs3.ErrJukebox {
		t.Fatalf("write behind a stalled flush: %v, want JUKEBOX", res.Status)
	}
	if r := <-leader; r.Status != nfs3.OK {
		t.Fatalf("leader: %v", r.Status)
	}
	var retry nfs3.WriteRes
	if err := e.nfs.CallXID(ctx, xid, nfs3.ProcWrite, args, &retry); err != nil {
		t.Fatal(err)
	}
	if retry.Status != nfs3.OK || retry.Committed != nfs3.FileSync {
		t.Fatalf("retry with the same xid: %v (JUKEBOX must not be replayed)", retry.Status)
	}
}
