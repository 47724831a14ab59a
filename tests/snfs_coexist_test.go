package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"snfs/state"
	"sync"
	"testing"
	"time"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
)

// Coexistence with plain NFSv3 clients (docs/protocol.md section 14): a plain
// client (libnfs, the stock Linux kernel client) reads or writes a file that a
// protocol client A has open for writing and caches, with dirty data. The
// server must call A back, and apply A's write-back, before it serves the plain
// READ or applies the plain WRITE or truncation.
//
// Every scenario starts from the same file on the server's disk: 12 KiB of '0'
// (coexistInitial). A holds 8 KiB of 'A' at offset 0 (coexistDirty) that it
// writes back, FILE_SYNC, only when called back. The plain write is shorter than
// A's write-back, so the order in which the server applied the two shows in the
// final bytes: had it applied the plain write first and A's write-back after it,
// A's bytes would cover the plain client's.

var (
	coexistInitial = bytes.Repeat([]byte("0"), 12<<10)
	coexistDirty   = bytes.Repeat([]byte("A"), 8<<10)
)

// cachedWriter is protocol client A: it has a file open for writing with
// caching granted and holds dirty data that it writes back (at offset 0, on its
// own connection) only when a callback asks for it.
type cachedWriter struct {
	*protoClient
	fh nfs3.FH

	mu    sync.Mutex
	modes []state.CallbackMode // every callback, in order
	// initial is the file's size and modification time on the server's disk
	// before A wrote anything, seen the same as each callback arrived: stat,
	// not a read, since an open of the file on the server machine is a local
	// process's, which would wait for A's own write-back (the server's lease).
	initial   [2]int64
	seen      [][2]int64
	wroteBack time.Time // when the write-back's reply came (zero: not yet)
	errs      []error   // reported by checkCalledBack: the handler may outlive the test
}

func newCachedWriter(t *testing.T, e *env, name string, fh nfs3.FH, file string, dirty []byte) *cachedWriter {
	t.Helper()
	w := &cachedWriter{protoClient: newProtoClient(t, e, name), fh: fh}
	var err error
	if w.initial, err = statStamp(file); err != nil {
		t.Fatal(err)
	}
	w.openCaching(fh, state.Write)
	w.setAnswer(func(a *snfs1.CallbackArgs) state.Outcome {
		seen, err := statStamp(file)
		w.mu.Lock()
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("stat of the file as the callback arrived: %w", err))
		}
		w.modes = append(w.modes, a.Mode)
		w.seen = append(w.seen, seen)
		first := w.wroteBack.IsZero()
		w.mu.Unlock()
		if !bytes.Equal(a.File, fh) || !a.Mode.WritesBack() || !first {
			return state.OK // once written back, A holds no dirty data
		}
		var res nfs3.WriteRes
		err = w.nfs().Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: 0, Count: uint32(len(dirty)), Stable: nfs3.FileSync, Data: dirty}, &res)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil || res.Status != nfs3.OK || res.Count != uint32(len(dirty)) {
			w.errs = append(w.errs, fmt.Errorf("A's write-back during the callback: %v %v (count %d)", err, res.Status, res.Count))
			return state.OK
		}
		w.wroteBack = time.Now()
		return state.OK
	})
	return w
}

// checkCalledBack: A got exactly one callback that invalidates,
// CB_WRITEBACK_INVALIDATE, last, after as many CB_WRITEBACKs as the plain
// client's GETATTRs asked for (a GETATTR leaves A caching); the first came
// before the plain access had changed the file (its size and time were still
// those from before A's open),
// and A's write-back was done before the plain client finished (end). It
// returns the number of CB_WRITEBACKs.
func (w *cachedWriter) checkCalledBack(t *testing.T, end time.Time) (writebacks int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, err := range w.errs {
		t.Error(err)
	}
	n := len(w.modes)
	for _, m := range w.modes[:max(n-1, 0)] {
		if m == state.Writeback {
			writebacks++
		}
	}
	if n == 0 || w.modes[n-1] != state.WritebackInvalidate || writebacks != n-1 {
		t.Errorf("A's callbacks: %v, want WRITEBACKs, then exactly one WRITEBACK_INVALIDATE", w.modes)
	}
	if len(w.seen) > 0 && w.seen[0] != w.initial {
		t.Errorf("when A's callback arrived the file was already changed: size and time %v, want %v", w.seen[0], w.initial)
	}
	if w.wroteBack.IsZero() {
		t.Error("A never wrote back")
	} else if !w.wroteBack.Before(end) {
		t.Errorf("A's write-back finished %v after the plain client did", w.wroteBack.Sub(end))
	}
	return writebacks
}

// statStamp is path's size and modification time.
func statStamp(path string) ([2]int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return [2]int64{}, err
	}
	return [2]int64{st.Size(), st.ModTime().UnixNano()}, nil
}

// byteRuns summarizes file content as runs of equal bytes: "4096×'A' 100×'B'".
func byteRuns(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	var s []byte
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && b[j] == b[i] {
			j++
		}
		if len(s) > 0 {
			s = append(s, ' ')
		}
		s = fmt.Appendf(s, "%d×%q", j-i, b[i])
		i = j
	}
	return string(s)
}

func catBytes(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// setupCoexist makes file name with coexistInitial, then protocol client A
// opens it for writing with caching and holds coexistDirty. The file must still
// hold coexistInitial: A has written nothing yet.
func setupCoexist(t *testing.T, e *env, name string) (nfs3.FH, *cachedWriter) {
	t.Helper()
	fh := e.create(e.nfs, e.root, name, 0o666)
	if err := os.WriteFile(e.path(name), coexistInitial, 0o666); err != nil {
		t.Fatal(err)
	}
	a := newCachedWriter(t, e, "coexist-a", fh, e.path(name), coexistDirty)
	if st, err := statStamp(e.path(name)); err != nil || st != a.initial {
		t.Fatalf("file before the plain access: size and time %v (%v), want %v", st, err, a.initial)
	}
	return fh, a
}

// runPlainWrite runs the libnfs writer and returns when it started and ended.
func runPlainWrite(t *testing.T, bin, url string, off int, trunc bool, data []byte) (start, end time.Time) {
	t.Helper()
	mode := "keep"
	if trunc {
		mode = "trunc"
	}
	cmd := command(bin, "write", url, fmt.Sprint(off), mode)
	cmd.Stdin = bytes.NewReader(data)
	start = time.Now()
	out, err := cmd.CombinedOutput()
	end = time.Now()
	if err != nil {
		t.Fatalf("libnfs write: %v\n%s", err, out)
	}
	return start, end
}

// TestCoexistLibnfsWrite: libnfs writes 100 'B' at offset 4096 into a file A
// caches for writing with 8 KiB of dirty 'A'. A must be called back
// (WRITEBACK_INVALIDATE) while the file is untouched, its write-back must be
// done before the plain write returns, and the file must end as A's data with
// the plain write over it: 4096 'A', 100 'B', 3996 'A', 4096 '0'. Were the plain
// write applied first, A's write-back would have covered the 'B's (8192 'A',
// 4096 '0').
//
// Then the plain write counts as an open for writing by the libnfs client for
// PlainHold (4 s here): every OPEN of A's sent before that could have expired
// gets no caching, and caching comes back once it has.
func TestCoexistLibnfsWrite(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	requireTool(t, "nfs-cat") // libnfs-utils, as a marker that libnfs is there
	bin := requireLibnfsOp(t)
	const hold = 4 * time.Second
	e := newEnv(t, "rw,no_root_squash")
	// A short recall back-off, so that only the plain hold keeps caching off;
	// the protocol's clock moves when the test says, so that an OPEN within
	// the hold is one by construction (it was serial: an OPEN had to go out
	// within 4 s of real time).
	clock := new(consist.OffsetClock)
	e.restartWith(func(c *server.Config) {
		c.Table.PlainHold, c.Table.RecallBackoff, c.Clock = hold, 100*time.Millisecond, clock
	})
	fh, a := setupCoexist(t, e, "f")

	plain := bytes.Repeat([]byte("B"), 100)
	_, end := runPlainWrite(t, bin, libnfsURL(e, e.dir+"/f"), 4096, false, plain)
	a.checkCalledBack(t, end)
	want := catBytes(coexistDirty[:4096], plain, coexistDirty[4196:], coexistInitial[8192:])
	if got, _ := os.ReadFile(e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("file after the plain write: %s, want %s (A's write-back first, then the plain write)", byteRuns(got), byteRuns(want))
	}

	// The plain client's hold: A closes, and its OPENs for writing get no
	// caching until the hold has expired (it runs from the plain client's
	// last access), then get it again.
	a.close(fh, state.Write, false)
	clock.Advance(300 * time.Millisecond) // past the recall back-off, within the hold
	res, err := a.open(fh, state.Write)
	ok(t, "A OPEN", res.Status, err)
	a.close(fh, state.Write, false)
	if res.CacheEnabled {
		t.Fatalf("A's OPEN got caching within the plain hold (%v)", hold)
	}
	clock.Advance(hold)
	if !waitFor(30*time.Second, func() bool {
		res, err := a.open(fh, state.Write)
		ok(t, "A OPEN", res.Status, err)
		a.close(fh, state.Write, false)
		return res.CacheEnabled
	}) {
		t.Fatalf("A's OPEN still gets no caching after the plain hold (%v) has passed", hold)
	}
}

// TestCoexistLibnfsTruncate: libnfs opens the file O_TRUNC (SETATTR of the
// size) and writes 100 'B' while A caches it with 8 KiB of dirty 'A'. A must be
// called back before the truncation, and the file must end as the plain
// client's 100 'B' alone. Had A's write-back been applied after the truncation
// or the write, the file would be 8 KiB long.
func TestCoexistLibnfsTruncate(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	requireTool(t, "nfs-cat")
	bin := requireLibnfsOp(t)
	e := newEnv(t, "rw,no_root_squash")
	_, a := setupCoexist(t, e, "f")

	plain := bytes.Repeat([]byte("B"), 100)
	_, end := runPlainWrite(t, bin, libnfsURL(e, e.dir+"/f"), 0, true, plain)
	a.checkCalledBack(t, end)
	if got, _ := os.ReadFile(e.path("f")); !bytes.Equal(got, plain) {
		t.Fatalf("file after the truncating plain write: %s, want %s", byteRuns(got), byteRuns(plain))
	}
}

// TestCoexistLibnfsRead: nfs-cat of a file A caches for writing with 8 KiB of
// dirty 'A' prints A's data: A is called back (WRITEBACK_INVALIDATE) and writes
// back before the plain READ is served. Served first, the READ would return
// the 12 KiB of '0' on the disk.
func TestCoexistLibnfsRead(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cat := requireTool(t, "nfs-cat")
	e := newEnv(t, "rw,no_root_squash")
	_, a := setupCoexist(t, e, "f")

	out, err := command(cat, libnfsURL(e, e.dir+"/f")).Output()
	end := time.Now()
	if err != nil {
		t.Fatalf("nfs-cat: %v\n%s", err, out)
	}
	a.checkCalledBack(t, end)
	want := catBytes(coexistDirty, coexistInitial[8192:])
	if !bytes.Equal(out, want) {
		t.Fatalf("nfs-cat printed %s, want %s (A's write-back)", byteRuns(out), byteRuns(want))
	}
}

// TestCoexistLibnfsReadGrown: A caches the file for writing and has grown it
// from 12 KiB to 20 KiB in its cache. nfs-cat reads as many bytes as GETATTR
// says the file has: its GETATTR calls A back (CB_WRITEBACK) before it is
// answered, so it prints all 20 KiB. Answered first, it would report 12 KiB
// and nfs-cat would stop there.
func TestCoexistLibnfsReadGrown(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cat := requireTool(t, "nfs-cat")
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o666)
	if err := os.WriteFile(e.path("f"), coexistInitial, 0o666); err != nil {
		t.Fatal(err)
	}
	grown := bytes.Repeat([]byte("A"), 20<<10)
	a := newCachedWriter(t, e, "coexist-a", fh, e.path("f"), grown)

	out, err := command(cat, libnfsURL(e, e.dir+"/f")).Output()
	end := time.Now()
	if err != nil {
		t.Fatalf("nfs-cat: %v\n%s", err, out)
	}
	if !bytes.Equal(out, grown) {
		t.Fatalf("nfs-cat printed %s, want %s (A's cached data, written back before the GETATTR)", byteRuns(out), byteRuns(grown))
	}
	if n := a.checkCalledBack(t, end); n == 0 {
		t.Error("no CB_WRITEBACK came before the invalidation: nfs-cat's GETATTR did not call A back")
	}
}

// TestCoexistLinuxClient: the stock Linux kernel client (guest/coexist.sh)
// writes 100 'G' at offset 4096 of coexist.bin, then appends "TAIL", while A
// caches the file with 8 KiB of dirty 'A'. A is called back before the guest's
// first access changes the file, and the file ends as A's data, the guest's
// write over it, and the append after the whole: 4096 'A', 100 'G', 3996 'A',
// 4096 '0', "TAIL". Applied in the other order, A's write-back would have
// covered the 'G's. The guest checks the same content through its own mount.
func TestCoexistLinuxClient(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest.
	requireRoot(t)
	guestRunner(t)
	e := newEnv(t, "rw,no_root_squash")
	_, a := setupCoexist(t, e, "coexist.bin")

	runGuest(t, e, "coexist.sh")
	a.checkCalledBack(t, time.Now())
	want := catBytes(coexistDirty[:4096], bytes.Repeat([]byte("G"), 100), coexistDirty[4196:], coexistInitial[8192:], []byte("TAIL"))
	if got, _ := os.ReadFile(e.path("coexist.bin")); !bytes.Equal(got, want) {
		t.Fatalf("file after the guest's writes: %s, want %s", byteRuns(got), byteRuns(want))
	}
}

// TestCoexistCreateUnchecked: a plain client's UNCHECKED CREATE with size 0 of
// a file A caches for writing with 8 KiB of dirty 'A' truncates it (RFC 1813
// section 3.3.8: an existing file gets the attributes) like a SETATTR of the
// size: A must be called back before, and the file must end empty. Applied
// first, the truncation would be covered by A's later write-back (8 KiB).
func TestCoexistCreateUnchecked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	_, a := setupCoexist(t, e, "f")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "f"}, Mode: nfs3.Unchecked,
		Attr: nfs3.Sattr{Size: u64p(0)}})
	ok(t, "plain CREATE UNCHECKED size 0", res.Status, err)
	a.checkCalledBack(t, time.Now())
	if got, _ := os.ReadFile(e.path("f")); len(got) != 0 {
		t.Fatalf("file after the truncating CREATE: %s, want it empty", byteRuns(got))
	}
}
