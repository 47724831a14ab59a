package cml

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
)

// End to end: the log reintegrated into a real server (in this process,
// on 127.0.0.1, exporting a directory on the local disk), through a real
// session, and the server's tree read back from the export.

type testServer struct {
	dir  string // the exported directory
	addr string
	root nfs3.FH
	nfs  *client.NFS
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches to each caller's identity, and permits need its change notifier (CI runs as root)")
	}
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	requireRoot(t)
	base := testDir(t)
	dir, stateDir := filepath.Join(base, "export"), filepath.Join(base, "state")
	for _, d := range []string{dir, stateDir} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{StateDir: stateDir, Logger: quietLogger(),
		Exports: []server.ExportConfig{{Path: dir, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln, nil) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	ts := &testServer{dir: dir, addr: ln.Addr().String()}
	ctx := context.Background()
	m, err := client.DialMount(ctx, "tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, dir)
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	ts.root = res.FH
	if ts.nfs, err = client.DialNFS(ctx, "tcp", ts.addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.nfs.Close() })
	return ts
}

func (ts *testServer) lookup(t *testing.T, dir nfs3.FH, name string) nfs3.FH {
	t.Helper()
	res, err := ts.nfs.Lookup(context.Background(), dir, name)
	if err != nil || res.Status != nfs3.OK {
		t.Fatalf("LOOKUP %s: %v %v", name, err, res.Status)
	}
	return res.Object
}

// names lists a directory of the export, sorted.
func names(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// okHandler answers every callback OK (the tests make no change that
// recalls their permits).
type okHandler struct{}

func (okHandler) Callback(context.Context, nfs3.FH, state.CallbackMode, *nfs3.Fattr) state.Outcome {
	return state.OK
}

func dialSession(ctx context.Context, addr, name string) (*client.Session, error) {
	return client.DialSession(ctx, "tcp", addr, client.SessionConfig{Name: name, Handler: okHandler{}, Logger: quietLogger()})
}

// getPermit asks for dir's permit until it is granted (the first asks are
// refused while the server probes the session's callback path).
func getPermit(ctx context.Context, s *client.Session, dir nfs3.FH) (snfs1.PermitRef, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, granted, err := s.GetPermit(ctx, dir)
		if err != nil {
			return snfs1.PermitRef{}, err
		}
		if granted {
			return snfs1.PermitRef{Dir: dir, Permit: id}, nil
		}
		if time.Now().After(deadline) {
			return snfs1.PermitRef{}, errors.New("GET_PERMIT never granted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crashingSender forwards a REINTEGRATE to the server and then, for the
// call numbered crashAt, reports a failure: the server applied the batch,
// the client never recorded the reply (a crash between the two).
type crashingSender struct {
	s       Sender
	calls   int
	crashAt int
}

func (c *crashingSender) Reintegrate(ctx context.Context, p []snfs1.PermitRef, recs []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	c.calls++
	res, err := c.s.Reintegrate(ctx, p, recs)
	if err == nil && c.calls == c.crashAt {
		return nil, errors.New("crashed after the server applied the batch")
	}
	return res, err
}

// TestReintegrateServer: under a permit, 1,000 creates, 500 unlinks of
// them, a MKDIR with a create in it, a rename into it, SETATTRs (two to
// collapse), a link and a symbolic link are logged, optimised and
// reintegrated in one REINTEGRATE; the export holds exactly the result and
// the handles the log learned are the server's. Then a second burst
// (1,300 creates: two batches) is reintegrated through a client that
// "crashes" after the server applied its second batch, before recording
// the reply: the log reopened from disk, with a new session of the same
// name (a restarted client: its permits are gone, it asks again), sends
// that batch again, and the server answers it without applying anything
// twice (a CREATE applied twice would fail EXIST).
func TestReintegrateServer(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := os.Mkdir(filepath.Join(ts.dir, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	D := ts.lookup(t, ts.root, "d")
	dref := snfs1.ObjRef{FH: D}
	s, err := dialSession(ctx, ts.addr, "cml-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Disconnect()
	p, err := getPermit(ctx, s, D)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(testDir(t), DirName)
	l := openLog(t, logDir, Options{})
	app := func(r snfs1.CMLRecord) uint64 {
		t.Helper()
		lsn, err := l.AppendLazy(r)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	prov := map[string]uint64{}
	for i := range 1000 {
		name := fmt.Sprintf("f%04d", i)
		prov[name] = app(createIn(dref, name))
	}
	for i := 0; i < 1000; i += 2 {
		app(mk(snfs1.CMLUnlink, dref, fmt.Sprintf("f%04d", i)))
	}
	sub := app(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: dref, Name: "sub", Attr: nfs3.Sattr{Mode: u32(0o755)}})
	inner := app(createIn(pv(sub), "inner"))
	app(mv(dref, "f0001", pv(sub), "moved"))
	app(sa(pv(prov["f0003"]), nfs3.Sattr{Mode: u32(0o600)}))
	app(sa(pv(prov["f0003"]), nfs3.Sattr{Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: 1234567}}}))
	app(ln(pv(prov["f0005"]), pv(sub), "link"))
	app(snfs1.CMLRecord{Op: snfs1.CMLSymlink, Dir: dref, Name: "sym", Target: "f0007"})
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := l.Len(); n != 1507 {
		t.Fatalf("log length %d", n)
	}
	res, err := l.Reintegrate(ctx, s, []snfs1.PermitRef{p})
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 of the records cancel (each removed file's create and unlink);
	// the two SETATTRs become one.
	if res.Sealed != 1507 || res.Cancelled != 1000 || res.Merged != 1 || res.Sent != 506 || res.Batches != 1 || len(res.Permits) != 1 {
		t.Fatalf("%+v", res)
	}
	if l.Len() != 0 || l.Stats().Bytes != 0 {
		t.Fatalf("log after reintegration: %+v", l.Stats())
	}
	var want []string
	for i := 3; i < 1000; i += 2 {
		want = append(want, fmt.Sprintf("f%04d", i))
	}
	want = append(want, "sub", "sym")
	if got := names(t, filepath.Join(ts.dir, "d")); !slices.Equal(got, want) {
		t.Fatalf("d holds %d names: %v...", len(got), got[:min(5, len(got))])
	}
	if got := fmt.Sprint(names(t, filepath.Join(ts.dir, "d/sub"))); got != "[inner link moved]" {
		t.Fatalf("d/sub holds %s", got)
	}
	st, err := os.Stat(filepath.Join(ts.dir, "d/f0003"))
	if err != nil || st.Mode().Perm() != 0o600 || st.ModTime().Unix() != 1234567 {
		t.Fatalf("f0003: %v %v %v", st.Mode(), st.ModTime(), err)
	}
	if target, err := os.Readlink(filepath.Join(ts.dir, "d/sym")); err != nil || target != "f0007" {
		t.Fatalf("sym: %q %v", target, err)
	}
	// The handles the log learned are the server's. Looked up through the
	// holder's own connection: another client's read of d or sub would
	// recall their permits (docs/protocol.md section 21.4), which the
	// second burst is sent under.
	own := &testServer{nfs: s.NFS()}
	subFH := own.lookup(t, D, "sub")
	for name, id := range map[string]uint64{"f0003": prov["f0003"], "f0999": prov["f0999"], "sub": sub} {
		fh, ok := l.Handle(id)
		if !ok || string(fh) != string(own.lookup(t, D, name)) {
			t.Fatalf("%s: the log's handle is not LOOKUP's", name)
		}
	}
	if fh, ok := l.Handle(inner); !ok || string(fh) != string(own.lookup(t, subFH, "inner")) {
		t.Fatal("inner: the log's handle is not LOOKUP's")
	}
	// The result gives each object made its handle and the attributes the
	// reply carried: the server's (a mount takes them instead of a GETATTR).
	for name, id := range map[string]uint64{"f0003": prov["f0003"], "f0999": prov["f0999"], "sub": sub} {
		m, ok := res.Made[id]
		fh, _ := l.Handle(id)
		if !ok || string(m.FH) != string(fh) || m.Attr == nil {
			t.Fatalf("%s: Result.Made %+v", name, m)
		}
		st, err := os.Stat(filepath.Join(ts.dir, "d", name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if m.Attr.FileID != sys.Ino || st.IsDir() != (m.Attr.Type == nfs3.TypeDir) {
			t.Fatalf("%s: Result.Made's attributes %+v; the export's inode %d, %v", name, m.Attr, sys.Ino, st.Mode())
		}
	}
	// An object a later record of the call changed has the attributes
	// after it: f0003's two SETATTRs (merged), f0005's LINK.
	if m := res.Made[prov["f0003"]]; m.Attr == nil || m.Attr.Mode != 0o600 || m.Attr.Mtime.Sec != 1234567 {
		t.Fatalf("f0003: Result.Made's attributes %+v; want those after its SETATTR", m.Attr)
	}
	if m := res.Made[prov["f0005"]]; m.Attr == nil || m.Attr.Nlink != 2 {
		t.Fatalf("f0005: Result.Made's attributes %+v; want those after its LINK", m.Attr)
	}
	// And the directories the batch changed, as they are after it.
	for _, dir := range []struct {
		fh   nfs3.FH
		path string
	}{{D, "d"}, {subFH, "d/sub"}} {
		a, ok := res.Dirs[string(dir.fh)]
		st, err := os.Stat(filepath.Join(ts.dir, dir.path))
		if err != nil {
			t.Fatal(err)
		}
		if !ok || a.FileID != st.Sys().(*syscall.Stat_t).Ino || int64(a.Mtime.Sec) != st.ModTime().Unix() || int64(a.Mtime.Nsec) != int64(st.ModTime().Nanosecond()) {
			t.Fatalf("%s: Result.Dirs %+v, %v; the export's inode %d, mtime %v", dir.path, a, ok, st.Sys().(*syscall.Stat_t).Ino, st.ModTime())
		}
	}
	if _, ok := res.Made[prov["f0000"]]; ok {
		t.Fatal("a cancelled create is in Result.Made")
	}
	if len(res.Made) != 500+3 {
		t.Fatalf("Result.Made holds %d objects; want 503 (500 files, sub, inner, sym)", len(res.Made))
	}
	if fh, ok := l.Handle(prov["f0000"]); ok {
		t.Fatalf("a cancelled create has a handle %x", fh)
	}
	if string(res.Permits[0].Dir) != string(subFH) || res.Permits[0].Permit == 0 {
		t.Fatal("MKDIR's permit is not on the new directory")
	}

	// The second burst, in two batches; the client dies after the server
	// applied the second.
	for i := range 1300 {
		app(createIn(dref, fmt.Sprintf("g%04d", i)))
	}
	app(createIn(snfs1.ObjRef{FH: subFH}, "g-in-sub")) // under the MKDIR's permit
	first := app(sa(pv(prov["f0009"]), nfs3.Sattr{Mode: u32(0o640)}))
	_ = first
	cs := &crashingSender{s: s, crashAt: 2}
	if _, err := l.Reintegrate(ctx, cs, append([]snfs1.PermitRef{p}, res.Permits...)); err == nil || cs.calls != 2 {
		t.Fatalf("the crashing client: %v after %d calls", err, cs.calls)
	}
	applied := names(t, filepath.Join(ts.dir, "d"))
	if !slices.Contains(applied, "g1299") {
		t.Fatal("the second batch was not applied before the crash")
	}
	l.Close()
	s.Disconnect()

	s2, err := dialSession(ctx, ts.addr, "cml-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Disconnect()
	l2 := openLog(t, logDir, Options{})
	st2 := l2.Stats()
	if st2.Planned == 0 || st2.Planned != st2.Records {
		t.Fatalf("reopened: %+v", st2)
	}
	var permits []snfs1.PermitRef
	for _, dir := range l2.Dirs() {
		p, err := getPermit(ctx, s2, dir)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	res, err = l2.Reintegrate(ctx, s2, permits)
	if err != nil {
		t.Fatalf("resend after the crash: %v", err)
	}
	if res.Batches != 1 || res.Sent != st2.Planned || l2.Len() != 0 {
		t.Fatalf("resend: %+v, log %+v", res, l2.Stats())
	}
	got := names(t, filepath.Join(ts.dir, "d"))
	if len(got) != len(want)+1300 || !slices.Equal(got, applied) {
		t.Fatalf("d holds %d names after the resend, %d before it", len(got), len(applied))
	}
	if fh, ok := l2.Handle(prov["f0003"]); !ok || string(fh) != string(ts.lookup(t, D, "f0003")) {
		t.Fatal("a handle of the first burst was lost by the reopen")
	}
	if st, err := os.Stat(filepath.Join(ts.dir, "d/f0009")); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("f0009 after the resend: %v %v", st.Mode(), err)
	}
	if got := fmt.Sprint(names(t, filepath.Join(ts.dir, "d/sub"))); got != "[g-in-sub inner link moved]" {
		t.Fatalf("d/sub holds %s", got)
	}
}

// The kill -9 test's child against the server: it logs the ops of killOp
// under a permit on the directory, reintegrating every 150, and reports
// each op once its Append returned.
const e2eChildEnv = "SNFS_CML_E2E_ADDR"

// killOp is op i of the killed client's sequence: creates, and every
// fourth an unlink of the create three before it.
func killOp(dir snfs1.ObjRef, i int) snfs1.CMLRecord {
	if i%4 == 3 {
		return mk(snfs1.CMLUnlink, dir, fmt.Sprintf("k%04d", i-3))
	}
	return createIn(dir, fmt.Sprintf("k%04d", i))
}

// killNames is the directory after the first n ops.
func killNames(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		if i%4 != 3 && !(i+3 < n && (i+3)%4 == 3) {
			out = append(out, fmt.Sprintf("k%04d", i))
		}
	}
	return out
}

func e2eChild(addr string) {
	fail := func(err error) { fmt.Println("error", err) }
	fh, err := hex.DecodeString(os.Getenv("SNFS_CML_E2E_DIR"))
	if err != nil {
		fail(err)
		return
	}
	ctx := context.Background()
	s, err := dialSession(ctx, addr, "cml-kill")
	if err != nil {
		fail(err)
		return
	}
	p, err := getPermit(ctx, s, fh)
	if err != nil {
		fail(err)
		return
	}
	l, err := Open(os.Getenv("SNFS_CML_E2E_LOG"), Options{SegmentBytes: 16 << 10})
	if err != nil {
		fail(err)
		return
	}
	fmt.Println("ready")
	for i := 0; ; i++ {
		if _, err := l.Append(killOp(snfs1.ObjRef{FH: fh}, i)); err != nil {
			fail(err)
			return
		}
		fmt.Println("acked", i)
		if i%150 == 149 {
			if _, err := l.Reintegrate(ctx, s, []snfs1.PermitRef{p}); err != nil {
				fail(err)
				return
			}
		}
	}
}

// TestKillReintegrate kills (SIGKILL) a client that appends and
// reintegrates against the server, at several points, and then reopens its
// log and reintegrates it as the restarted client (same name, new session,
// the permit asked again): the directory then holds what the ops up to the
// last acknowledged one (or the one after it, written but not yet
// acknowledged) make, so nothing acknowledged is lost, and the
// reintegration meets no conflict, so nothing was applied twice (a CREATE
// again fails EXIST, an UNLINK again NOENT).
func TestKillReintegrate(t *testing.T) {
	ts := startServer(t)
	for n, after := range []int{5, 149, 160, 299, 420} {
		t.Run(strconv.Itoa(after), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := fmt.Sprintf("k%d", n)
			if err := os.Mkdir(filepath.Join(ts.dir, name), 0o777); err != nil {
				t.Fatal(err)
			}
			D := ts.lookup(t, ts.root, name)
			logDir := filepath.Join(testDir(t), DirName)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), e2eChildEnv+"="+ts.addr, "SNFS_CML_E2E_DIR="+hex.EncodeToString(D), "SNFS_CML_E2E_LOG="+logDir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acked := -1
			sc := bufio.NewScanner(out)
			for acked < after && sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "error") {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("child: %s", line)
				}
				if v, ok := strings.CutPrefix(line, "acked "); ok {
					acked, _ = strconv.Atoi(v)
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					acked, _ = strconv.Atoi(v)
				}
			}
			cmd.Wait()
			if acked < after {
				t.Fatalf("the child acknowledged %d ops", acked+1)
			}
			s, err := dialSession(ctx, ts.addr, "cml-kill")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Disconnect()
			l := openLog(t, logDir, Options{})
			p, err := getPermit(ctx, s, D)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Reintegrate(ctx, s, []snfs1.PermitRef{p}); err != nil {
				t.Fatalf("reintegration after the kill: %v", err)
			}
			got := names(t, filepath.Join(ts.dir, name))
			if !slices.Equal(got, killNames(acked+1)) && !slices.Equal(got, killNames(acked+2)) {
				t.Fatalf("after op %d acknowledged, the directory holds %d names (want %d or %d)", acked, len(got), len(killNames(acked+1)), len(killNames(acked+2)))
			}
			if err := s.PermitRelease(ctx, []snfs1.PermitRef{p}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReintegrateConflict: a record in a directory without a permit stops
// the batch (SNFS_ERR_NOPERMIT) after the records before it are recorded;
// with the permit the call goes on from there; a record that meets another
// client's change (a name made on the server meanwhile: EXIST) is returned,
// skipped durably, and the records after it are sent.
func TestReintegrateConflict(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(filepath.Join(ts.dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	D, E := ts.lookup(t, ts.root, "d"), ts.lookup(t, ts.root, "e")
	s, err := dialSession(ctx, ts.addr, "cml-conflict")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Disconnect()
	pd, err := getPermit(ctx, s, D)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(testDir(t), DirName)
	l := openLog(t, logDir, Options{})
	var lsns []uint64
	for _, r := range []snfs1.CMLRecord{createIn(snfs1.ObjRef{FH: D}, "one"), createIn(snfs1.ObjRef{FH: E}, "x"),
		createIn(snfs1.ObjRef{FH: D}, "taken"), createIn(snfs1.ObjRef{FH: D}, "two")} {
		lsn, err := l.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		lsns = append(lsns, lsn)
	}
	if err := os.WriteFile(filepath.Join(ts.dir, "d/taken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = l.Reintegrate(ctx, s, []snfs1.PermitRef{pd})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Record.LSN != lsns[1] || ce.Status != snfs1.ErrNoPermit || l.Len() != 3 {
		t.Fatalf("without e's permit: %v, log %+v", err, l.Stats())
	}
	pe, err := getPermit(ctx, s, E)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Reintegrate(ctx, s, []snfs1.PermitRef{pd, pe})
	if !errors.As(err, &ce) || ce.Record.LSN != lsns[2] || ce.Status != nfs3.ErrExist || l.Len() != 2 {
		t.Fatalf("the name made meanwhile: %v, log %+v", err, l.Stats())
	}
	if err := l.Skip(lsns[3]); err == nil {
		t.Fatal("a record that is not the next one was skipped")
	}
	if err := l.Skip(lsns[2]); err != nil {
		t.Fatal(err)
	}
	// The skip is durable: the reopened log goes on after it.
	l.Close()
	l = openLog(t, logDir, Options{})
	if recs := l.Records(); len(recs) != 1 || recs[0].LSN != lsns[3] {
		t.Fatalf("reopened after the skip: %v", lsnsOf(recs))
	}
	if _, err := l.Reintegrate(ctx, s, []snfs1.PermitRef{pd, pe}); err != nil || l.Len() != 0 {
		t.Fatalf("after the skip: %v, log %+v", err, l.Stats())
	}
	if got := fmt.Sprint(names(t, filepath.Join(ts.dir, "d")), names(t, filepath.Join(ts.dir, "e"))); got != "[one taken two] [x]" {
		t.Fatalf("the server holds %s", got)
	}
	if _, ok := l.Handle(lsns[2]); ok {
		t.Fatal("the skipped create has a handle")
	}
}
