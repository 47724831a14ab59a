package cml

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// testDir is a fresh directory on the local disk (not tmpfs: flushes are
// real), removed after the test.
func testDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "snfs-cml-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func openLog(t *testing.T, dir string, o Options) *Log {
	t.Helper()
	l, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func createIn(dir snfs1.ObjRef, name string) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: dir, Name: name, Attr: nfs3.Sattr{Mode: u32(0o644)}}
}

func lsnsOf(recs []snfs1.CMLRecord) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.LSN)
	}
	return out
}

// TestAppendReopen: records come back from the disk as they were appended,
// with LSNs that go on increasing after a reopen; a new log's first LSN is
// the clock's microseconds; the accessors count what is not reintegrated.
func TestAppendReopen(t *testing.T) {
	dir := filepath.Join(testDir(t), DirName)
	now := time.Unix(1800000000, 0)
	clock := func() time.Time { return now }
	l := openLog(t, dir, Options{Now: clock})
	var want []snfs1.CMLRecord
	for i := range 50 {
		var rec snfs1.CMLRecord
		switch i % 3 {
		case 0:
			rec = createIn(dD, fmt.Sprintf("f%d", i))
		case 1:
			rec = snfs1.CMLRecord{Op: snfs1.CMLSymlink, Dir: dD, Name: fmt.Sprintf("l%d", i), Target: strings.Repeat("t", i*20)}
		default:
			rec = sa(pv(want[i-2].LSN), nfs3.Sattr{Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}})
		}
		lsn, err := l.Append(rec)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && lsn != uint64(now.UnixMicro()) {
			t.Fatalf("first LSN %d", lsn)
		}
		rec.LSN = lsn
		if makes(rec.Op) {
			rec.New = lsn
		}
		want = append(want, rec)
		now = now.Add(time.Second)
	}
	if _, err := l.Append(sa(pv(want[49].LSN+5), nfs3.Sattr{})); err == nil {
		t.Fatal("a record naming a provisional id no record gave was logged")
	}
	st := l.Stats()
	if st.Records != 50 || st.Oldest != 50*time.Second || st.Bytes < 50*30 {
		t.Fatalf("stats %+v", st)
	}
	l.Close()
	l2 := openLog(t, dir, Options{Now: clock})
	got := l2.Records()
	if !slices.EqualFunc(got, want, func(a, b snfs1.CMLRecord) bool { return string(encodeRec(&a)) == string(encodeRec(&b)) }) {
		t.Fatalf("reopened: %v, want %v", lsnsOf(got), lsnsOf(want))
	}
	if st2 := l2.Stats(); st2 != st {
		t.Fatalf("stats after reopen %+v, before %+v", st2, st)
	}
	lsn, err := l2.AppendLazy(createIn(dD, "after"))
	if err != nil || lsn != want[49].LSN+1 {
		t.Fatalf("LSN after reopen %d (%v), last %d", lsn, err, want[49].LSN)
	}
}

// TestGroupCommit: concurrent Appends all return durable, with distinct
// increasing LSNs, and the log holds every one.
func TestGroupCommit(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{SegmentBytes: 8 << 10})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []uint64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				lsn, err := l.Append(createIn(dD, fmt.Sprintf("g%d-%d", g, i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, lsn)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(got)
	if len(got) != 320 || len(slices.Compact(slices.Clone(got))) != 320 || got[319]-got[0] != 319 {
		t.Fatalf("%d LSNs from %d to %d", len(got), got[0], got[len(got)-1])
	}
	l.Close()
	if recs := openLog(t, dir, Options{}).Records(); !slices.Equal(lsnsOf(recs), got) {
		t.Fatalf("reopened: %d records", len(recs))
	}
}

// fakeServer answers REINTEGRATE as the server does for the tests that
// need no server: every record OK (a handle per provisional id), the last
// applied LSN kept, a record at or below it answered again; failAt refuses
// that LSN with EXIST.
type fakeServer struct {
	last   uint64
	failAt uint64
	calls  int
}

func (f *fakeServer) Reintegrate(_ context.Context, _ []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	f.calls++
	res := &snfs1.ReintegrateRes{}
	for _, r := range recs {
		if r.LSN == f.failAt && r.LSN > f.last {
			res.Results = append(res.Results, snfs1.CMLResult{LSN: r.LSN, Status: nfs3.ErrExist})
			break
		}
		c := snfs1.CMLResult{LSN: r.LSN}
		if r.New != 0 {
			c.Obj = nfs3.FH(fmt.Sprintf("H%d", r.New))
		}
		res.Results = append(res.Results, c)
		f.last = max(f.last, r.LSN)
	}
	res.Applied = f.last
	return res, nil
}

// segments returns the log's segment files, oldest first.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// frameEnds returns where each frame of a segment file ends.
func frameEnds(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for off := 0; ; {
		_, next, ok := decodeFrame(b, off)
		if !ok {
			return ends
		}
		ends = append(ends, next)
		off = next
	}
}

// copyDir copies a log directory's files.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	os.RemoveAll(to)
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(from)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// damage cuts the file at off (garbage false) or overwrites everything
// from off to end with garbage (a torn write that left bytes).
func damage(t *testing.T, path string, off, end int, garbage bool) {
	t.Helper()
	if !garbage {
		if err := os.Truncate(path, int64(off)); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Every byte changed: a fixed pattern equal to a byte it overwrites
	// (the last byte of a frame, whose LSNs come from the clock) would
	// leave that frame whole, and the test would expect it cut.
	junk := make([]byte, end-off)
	if _, err := f.ReadAt(junk, int64(off)); err != nil {
		t.Fatal(err)
	}
	for i := range junk {
		junk[i] ^= byte(1 + i*7%255)
	}
	if _, err := f.WriteAt(junk, int64(off)); err != nil {
		t.Fatal(err)
	}
}

// TestTornTail: the last segment is cut at every byte offset of its tail,
// or its tail from there overwritten with garbage, as a crash in the
// middle of writing it may leave it; each time, the reopened log holds
// exactly the frames that were whole (every record whose Append returned
// before the cut), the cut is made for good, and the log appends after it.
// (Around each frame's end, the log is also appended to and opened again.)
// The tail holds records, then a plan and the acknowledgement of part of
// it, so a torn plan (dropped: none of it was sent) and a torn
// acknowledgement (the batch is sent again) are covered too.
func TestTornTail(t *testing.T) {
	base := testDir(t)
	orig := filepath.Join(base, "orig")
	// Opened twice: the first makes the checkpoint segment, the second
	// writes into a segment of its own, the tail that is cut.
	small := Options{SegmentBytes: 4096, Logger: quietLogger()}
	openLog(t, orig, small).Close()
	l := openLog(t, orig, small)
	var lsns []uint64
	for i := range 4 {
		lsn, err := l.Append(createIn(dD, fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		lsns = append(lsns, lsn)
	}
	// A plan of the 4 records, the first 2 acknowledged, the 3rd refused.
	srv := &fakeServer{failAt: lsns[2]}
	_, err := l.Reintegrate(context.Background(), srv, nil)
	if ce, ok := err.(*ConflictError); !ok || ce.Record.LSN != lsns[2] {
		t.Fatalf("reintegrate: %v", err)
	}
	l.Close()
	segs := segments(t, orig)
	last := segs[len(segs)-1]
	ends := frameEnds(t, last)
	if len(ends) != 4+2 {
		t.Fatalf("%d frames in the last segment", len(ends))
	}
	planEnd, ackEnd := ends[4], ends[5]
	work := filepath.Join(base, "work")
	for _, garbage := range []bool{false, true} {
		for cut := 0; cut <= ackEnd; cut++ {
			boundary := slices.Contains(ends, cut) || slices.Contains(ends, cut+1) || slices.Contains(ends, cut-1)
			if garbage && !boundary && cut%5 != 0 {
				continue // garbage at every fifth offset and around each frame's end
			}
			copyDir(t, orig, work)
			wl := filepath.Join(work, filepath.Base(last))
			damage(t, wl, cut, ackEnd, garbage)
			for reopen := range 2 {
				w, err := Open(work, small)
				if err != nil {
					t.Fatal(err)
				}
				whole := 0
				for whole < len(ends) && ends[whole] <= cut {
					whole++
				}
				var want []uint64
				var planned int
				switch {
				case cut < planEnd:
					want = slices.Clone(lsns[:min(whole, 4)])
				case cut < ackEnd:
					want, planned = slices.Clone(lsns), 4
				default:
					want, planned = slices.Clone(lsns[2:]), 2
				}
				got := w.Records()
				if !slices.Equal(lsnsOf(got), want) || w.Stats().Planned != planned {
					t.Fatalf("garbage %v cut at %d (reopen %d): records %v (planned %d), want %v (planned %d)",
						garbage, cut, reopen, lsnsOf(got), w.Stats().Planned, want, planned)
				}
				if cut >= ackEnd {
					if fh, ok := w.Handle(lsns[1]); !ok || string(fh) != fmt.Sprintf("H%d", lsns[1]) {
						t.Fatalf("cut at %d: the acknowledged handle is lost", cut)
					}
				}
				if reopen == 0 && !boundary {
					w.Close()
					break
				}
				if reopen == 0 {
					if _, err := w.Append(createIn(dD, "new")); err != nil {
						t.Fatal(err)
					}
					want = append(want, 0) // checked by length below
				}
				w.Close()
				if reopen == 0 {
					w2, err := Open(work, small)
					if err != nil {
						t.Fatal(err)
					}
					if n := len(w2.Records()); n != len(want) {
						t.Fatalf("cut at %d: %d records after an append, want %d", cut, n, len(want))
					}
					// Drop the record appended, to see the cut alone again.
					w2.Close()
					segs := segments(t, work)
					os.Remove(segs[len(segs)-1])
					os.Remove(segs[len(segs)-2])
				}
			}
		}
	}
}

// The kill -9 test's child: it appends records to the log in the directory
// this variable names, reports each LSN once Append returned, and is killed
// by the parent.
const crashEnv = "SNFS_CML_CRASH_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		time.Sleep(time.Hour)
		os.Exit(3)
	}
	if addr := os.Getenv(e2eChildEnv); addr != "" {
		e2eChild(addr)
		time.Sleep(time.Hour)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func crashChild(dir string) {
	lazy := os.Getenv("SNFS_CML_CRASH_LAZY") != ""
	l, err := Open(dir, Options{SegmentBytes: 16 << 10})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	for i := 0; ; i++ {
		append := l.Append
		if lazy {
			append = l.AppendLazy
		}
		lsn, err := append(createIn(dD, fmt.Sprintf("f%d", i)))
		if err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("acked", lsn)
	}
}

// TestKillAppend kills an appending process with SIGKILL at several points
// and reopens its log: every LSN whose Append returned is there, in order,
// without a gap, and the next LSN is above them. AppendLazy's records too:
// a killed process's writes are the kernel's (only a machine crash needs
// the flush).
func TestKillAppend(t *testing.T) {
	for _, c := range []struct {
		after int
		lazy  bool
	}{{1, false}, {50, false}, {400, false}, {1, true}, {3000, true}} {
		after := c.after
		t.Run(fmt.Sprintf("%d-lazy=%v", after, c.lazy), func(t *testing.T) {
			dir := testDir(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+dir)
			if c.lazy {
				cmd.Env = append(cmd.Env, "SNFS_CML_CRASH_LAZY=1")
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var acked []uint64
			sc := bufio.NewScanner(out)
			for len(acked) < after && sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "error") {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("child: %s", line)
				}
				if n, ok := strings.CutPrefix(line, "acked "); ok {
					v, _ := strconv.ParseUint(n, 10, 64)
					acked = append(acked, v)
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					v, _ := strconv.ParseUint(n, 10, 64)
					acked = append(acked, v)
				}
			}
			cmd.Wait()
			if len(acked) < after {
				t.Fatalf("child acknowledged %d records", len(acked))
			}
			l := openLog(t, dir, Options{})
			got := lsnsOf(l.Records())
			if len(got) < len(acked) || !slices.Equal(got[:len(acked)], acked) {
				t.Fatalf("%d acknowledged, %d recovered (first %v)", len(acked), len(got), got[:min(3, len(got))])
			}
			for i := 1; i < len(got); i++ {
				if got[i] != got[i-1]+1 {
					t.Fatalf("a gap after LSN %d", got[i-1])
				}
			}
			lsn, err := l.Append(createIn(dD, "after"))
			if err != nil || lsn <= got[len(got)-1] {
				t.Fatalf("LSN after the crash %d, last %d: %v", lsn, got[len(got)-1], err)
			}
		})
	}
}

// boundedServer is a fakeServer that checks each call's bounds and that
// every directory a record changes is named with its permit.
type boundedServer struct {
	fakeServer
	t       *testing.T
	batches []int
}

func (b *boundedServer) Reintegrate(ctx context.Context, p []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if len(recs) > snfs1.ReintegrateMax || len(p) > snfs1.PermitReleaseMax {
		b.t.Errorf("a batch of %d records and %d permits", len(recs), len(p))
	}
	named := map[string]bool{}
	for _, x := range p {
		named[string(x.Dir)] = true
	}
	for _, r := range recs {
		if !named[string(r.Dir.FH)] {
			b.t.Errorf("LSN %d: its directory's permit is not named", r.LSN)
		}
	}
	b.batches = append(b.batches, len(recs))
	return b.fakeServer.Reintegrate(ctx, p, recs)
}

// TestBatchBounds: 2,500 records in 300 directories go in batches of at
// most 1,024 records and 256 permits, each naming the permits of the
// directories its records change, in order; the log is then empty and
// compacted into one segment.
func TestBatchBounds(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{SegmentBytes: 64 << 10})
	var permits []snfs1.PermitRef
	for d := range 300 {
		permits = append(permits, snfs1.PermitRef{Dir: nfs3.FH(fmt.Sprintf("dir%03d", d)), Permit: uint64(d + 1)})
	}
	for i := range 2500 {
		// The first 1,000 records in 4 directories, the rest spread over 300.
		d := i % 4
		if i >= 1000 {
			d = i % 300
		}
		if _, err := l.AppendLazy(createIn(snfs1.ObjRef{FH: permits[d].Dir}, fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	srv := &boundedServer{t: t}
	res, err := l.Reintegrate(context.Background(), srv, permits)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 2500 || l.Len() != 0 || len(srv.batches) < 3 || srv.batches[0] != 1024 || srv.batches[1] != 256 {
		t.Fatalf("%+v: batches %v", res, srv.batches)
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segments after compaction", n)
	}
	if st := openLog(t, dir, Options{}).Stats(); st.Records != 0 {
		t.Fatalf("reopened: %+v", st)
	}
}

// failingServer fails every call, as a broken connection does.
type failingServer struct{}

func (failingServer) Reintegrate(context.Context, []snfs1.PermitRef, []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	return nil, fmt.Errorf("connection refused")
}

// TestTornPlanThenNewPlan: a plan of two chunks whose second a crash cut
// short is dropped at the reopen, and the plan sealed again after it (in
// the next segment, with the same highest LSN) is read back whole: the
// torn plan's first chunk does not join it.
func TestTornPlanThenNewPlan(t *testing.T) {
	dir := testDir(t)
	small := Options{SegmentBytes: 4096, Logger: quietLogger()}
	l := openLog(t, dir, small)
	for i := range 1100 {
		if _, err := l.AppendLazy(createIn(dD, fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Reintegrate(context.Background(), failingServer{}, nil); err == nil || l.Stats().Planned != 1100 {
		t.Fatalf("%v %+v", err, l.Stats())
	}
	l.Close()
	segs := segments(t, dir)
	last := segs[len(segs)-1]
	ends := frameEnds(t, last)
	if len(ends) != 2 {
		t.Fatalf("the plan's segment holds %d frames", len(ends))
	}
	damage(t, last, ends[0]+10, ends[1], false)
	l = openLog(t, dir, small)
	if st := l.Stats(); st.Records != 1100 || st.Planned != 0 {
		t.Fatalf("after the torn plan: %+v", st)
	}
	if _, err := l.Reintegrate(context.Background(), failingServer{}, nil); err == nil {
		t.Fatal("the failing server answered")
	}
	l.Close()
	l = openLog(t, dir, small)
	if st := l.Stats(); st.Records != 1100 || st.Planned != 1100 {
		t.Fatalf("the plan sealed again: %+v", st)
	}
}

// onceServer answers its first call as fakeServer and fails every later
// one, as a server that goes away between two batches of a call.
type onceServer struct{ fakeServer }

func (o *onceServer) Reintegrate(ctx context.Context, p []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	if o.calls > 0 {
		return nil, fmt.Errorf("connection refused")
	}
	return o.fakeServer.Reintegrate(ctx, p, recs)
}

// TestStoresUntilAcknowledged: a CML_STORE of an object made by the log is
// reported by Stores while it is not acknowledged (raw, then in the plan
// after a batch that made the object was acknowledged and the next one
// failed, then after a reopen), named by provisional id or by the handle
// the server gave, and no longer once acknowledged.
func TestStoresUntilAcknowledged(t *testing.T) {
	dir := testDir(t)
	l := openLog(t, dir, Options{})
	prov, err := l.AppendLazy(createIn(dD, "f"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range snfs1.ReintegrateMax - 1 {
		if _, err := l.AppendLazy(createIn(dD, fmt.Sprintf("g%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if l.Stores(prov) {
		t.Fatal("a STORE reported before any was logged")
	}
	if _, err := l.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLStore, Obj: snfs1.ObjRef{Prov: prov}, Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if !l.Stores(prov) || l.Stores(prov+1) {
		t.Fatal("the raw STORE not reported, or reported for another object")
	}
	srv := &onceServer{}
	if _, err := l.Reintegrate(context.Background(), srv, nil); err == nil {
		t.Fatal("the second batch did not fail")
	}
	if _, made := l.Handle(prov); !made || !l.Stores(prov) {
		t.Fatalf("after the first batch (made %v): the STORE in the plan not reported", made)
	}
	l.Close()
	l = openLog(t, dir, Options{})
	fh, made := l.Handle(prov)
	if !made || !l.Stores(prov) {
		t.Fatal("reopened: the STORE not reported")
	}
	ok := &fakeServer{last: srv.last}
	if _, err := l.Reintegrate(context.Background(), ok, nil); err != nil {
		t.Fatal(err)
	}
	if l.Stores(prov) {
		t.Fatal("an acknowledged STORE reported")
	}
	if _, err := l.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLStore, Obj: snfs1.ObjRef{FH: fh}, Data: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if !l.Stores(prov) {
		t.Fatal("a STORE by the object's handle not reported")
	}
}

// TestChangesDir: a directory is changed by the records not yet
// reintegrated that name it (by handle, or by a provisional id the server
// has answered) as the directory of a change, either directory of a
// rename, or the object of a SETATTR; records of other directories do not
// count, and nothing does once they are in.
func TestChangesDir(t *testing.T) {
	l := openLog(t, filepath.Join(testDir(t), DirName), Options{})
	x, y, z, w := nfs3.FH("X"), nfs3.FH("Y"), nfs3.FH("Z"), nfs3.FH("W")
	mk := snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: w}, Name: "sub", Attr: nfs3.Sattr{Mode: u32(0o755)}}
	prov, err := l.Append(mk)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []snfs1.CMLRecord{
		createIn(snfs1.ObjRef{FH: x}, "a"),
		{Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: w}, Name: "b", ToDir: snfs1.ObjRef{FH: y}, ToName: "b"},
	} {
		if _, err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		fh   nfs3.FH
		want bool
	}{{x, true}, {y, true}, {w, true}, {z, false}} {
		if got := l.ChangesDir(c.fh); got != c.want {
			t.Errorf("ChangesDir(%s) = %v; want %v", c.fh, got, c.want)
		}
	}
	if got := l.AttrsChanged(); len(got) != 0 {
		t.Errorf("AttrsChanged() = %q; want none (no SETATTR, no LINK)", got)
	}
	if _, err := l.Reintegrate(context.Background(), &fakeServer{}, nil); err != nil {
		t.Fatal(err)
	}
	if l.ChangesDir(x) || l.ChangesDir(w) {
		t.Fatal("records reintegrated still change their directories")
	}
	// A record in the directory made above, by its provisional id, and a
	// SETATTR of z: they change the real directory and z.
	real, ok := l.Handle(prov)
	if !ok {
		t.Fatalf("no handle for the MKDIR's provisional id %d", prov)
	}
	if _, err := l.Append(createIn(snfs1.ObjRef{Prov: prov}, "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{FH: z}, Attr: nfs3.Sattr{Mode: u32(0o700)}}); err != nil {
		t.Fatal(err)
	}
	if got := l.AttrsChanged(); len(got) != 1 || string(got[0]) != "Z" {
		t.Errorf("AttrsChanged() = %q; want Z", got)
	}
	if !l.ChangesDir(real) || !l.ChangesDir(z) || l.ChangesDir(x) {
		t.Fatalf("ChangesDir: real %v, z %v, x %v; want true, true, false", l.ChangesDir(real), l.ChangesDir(z), l.ChangesDir(x))
	}
}
