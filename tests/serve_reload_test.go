package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"snfs/state"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount3"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// reloadOutcomes are the log lines `snfs serve` writes at the end of
// each SIGHUP: the exports reloaded, or not.
func reloadOutcomes(t *testing.T, s *srvProc) []string {
	t.Helper()
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `msg="exports reloaded"`) || strings.Contains(l, `msg="exports not reloaded`) {
			out = append(out, l)
		}
	}
	return out
}

// hup writes exports as the server's exports file, sends the server SIGHUP
// and returns the log line that says how the reload ended.
func (s *srvProc) hup(t *testing.T, file, exports string) string {
	t.Helper()
	if err := os.WriteFile(file, []byte(exports), 0o644); err != nil {
		t.Fatal(err)
	}
	before := len(reloadOutcomes(t, s))
	if err := syscall.Kill(s.pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if o := reloadOutcomes(t, s); len(o) > before {
			return o[before]
		}
		if gone(s.pid) {
			t.Fatalf("snfs serve exited on SIGHUP; its log:\n%s", tail(s.logPath, 30))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload outcome logged 20 s after SIGHUP; the log:\n%s", tail(s.logPath, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reloadDirs makes the named export directories (world-writable) under one
// fresh directory on disk.
func reloadDirs(t *testing.T, names ...string) map[string]string {
	base := diskTempDir(t, "snfs-reload-")
	dirs := map[string]string{}
	for _, n := range names {
		d := filepath.Join(base, n)
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
		dirs[n] = d
	}
	return dirs
}

// TestServeReloadExports: `snfs serve --exports FILE` and SIGHUP, as
// `exportfs -r`: on the same TCP connections (counted: none is made again),
// a removed export's handles are NFS3ERR_STALE at once and its MNT is
// MNT3ERR_NOENT, an added export is mountable and writable, an option changed
// (ro to rw) and a client list changed (127.0.0.1 no longer listed) apply to
// the next call; a retransmission of a CREATE executed before the reload gets
// its reply from the reply cache, a new CREATE there NFS3ERR_STALE; a file
// that does not parse is reported with its file and line and leaves the
// exports as they were; adding the removed export again makes its handles
// valid again; the server stays up through all of it and ends cleanly on
// SIGTERM.
func TestServeReloadExports(t *testing.T) {
	t.Parallel()
	dirs := reloadDirs(t, "a", "b", "c", "d")
	a, b, c, d := dirs["a"], dirs["b"], dirs["c"], dirs["d"]
	for _, dir := range []string{a, b, c, d} {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data of "+filepath.Base(dir)), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(diskTempDir(t, "snfs-exports-"), "exports")
	first := fmt.Sprintf("%s 127.0.0.1(rw,no_root_squash)\n%s 127.0.0.1(ro,no_root_squash)\n%s 127.0.0.1(rw,no_root_squash)\n", a, c, d)
	if err := os.WriteFile(file, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServeProc(t, "--exports", file)

	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var dials atomic.Int32
	counted := sunrpc.WithOnConnect(func(context.Context, *sunrpc.Conn) error { dials.Add(1); return nil })
	nc, err := client.DialNFS(cctx, "tcp", s.addr(), counted)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mc, err := client.DialMount(cctx, "tcp", s.mountAddr(), counted)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	mnt := func(dir string) *mount3.MntRes {
		t.Helper()
		res, err := mc.Mnt(cctx, dir)
		if err != nil {
			t.Fatalf("MNT %s: %v", dir, err)
		}
		return res
	}
	root := func(dir string) nfs3.FH {
		t.Helper()
		res := mnt(dir)
		if res.Status != mount3.OK {
			t.Fatalf("MNT %s: %v", dir, res.Status)
		}
		return res.FH
	}
	lookup := func(dir nfs3.FH, name string) nfs3.FH {
		t.Helper()
		res, err := nc.Lookup(cctx, dir, name)
		ok(t, "LOOKUP "+name, res.Status, err)
		return res.Object
	}
	getattr := func(what string, fh nfs3.FH, exp nfs3.Status) {
		t.Helper()
		res, err := nc.Getattr(cctx, fh)
		want(t, "GETATTR "+what, res.Status, err, exp)
	}
	write := func(what string, fh nfs3.FH, exp nfs3.Status) {
		t.Helper()
		res, err := nc.Write(cctx, fh, 0, []byte("new "), nfs3.FileSync)
		want(t, "WRITE "+what, res.Status, err, exp)
	}

	rootA, rootC, rootD := root(a), root(c), root(d)
	fA, fC, fD := lookup(rootA, "f"), lookup(rootC, "f"), lookup(rootD, "f")
	write("a/f", fA, nfs3.OK)
	write("c/f on ro", fC, nfs3.ErrROFS)
	getattr("d/f", fD, nfs3.OK)
	if st := mnt(b).Status; st != mount3.ErrNoEnt {
		t.Fatalf("MNT %s before it is exported: %v, want MNT3ERR_NOENT", b, st)
	}
	// A CREATE whose reply is lost: its retransmission comes after the reload.
	mode := uint32(0o644)
	createArgs := &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: rootA, Name: "made"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}}
	xid := nc.NextXID()
	var made nfs3.CreateRes
	if err := nc.CallXID(cctx, xid, nfs3.ProcCreate, createArgs, &made); err != nil || made.Status != nfs3.OK {
		t.Fatalf("CREATE made: %v %v", made.Status, err)
	}

	// Reload: a removed, b added, c becomes rw, d no longer open to 127.0.0.1.
	second := fmt.Sprintf("%s *(rw,no_root_squash)\n%s 127.0.0.1(rw,no_root_squash)\n%s 10.9.9.9(rw)\n", b, c, d)
	out := s.hup(t, file, second)
	for _, w := range []string{`msg="exports reloaded"`, "added=[" + b + "]", "removed=[" + a + "]", "changed=\"[" + c + " " + d + "]\""} {
		if !strings.Contains(out, w) {
			t.Errorf("reload log line %q lacks %q", out, w)
		}
	}
	getattr("a's root after a is removed", rootA, nfs3.ErrStale)
	getattr("a/f after a is removed", fA, nfs3.ErrStale)
	write("a/f after a is removed", fA, nfs3.ErrStale)
	if st := mnt(a).Status; st != mount3.ErrNoEnt {
		t.Fatalf("MNT of removed %s: %v, want MNT3ERR_NOENT", a, st)
	}
	var again nfs3.CreateRes
	if err := nc.CallXID(cctx, xid, nfs3.ProcCreate, createArgs, &again); err != nil {
		t.Fatal(err)
	}
	if again.Status != nfs3.OK || string(again.Object) != string(made.Object) {
		t.Fatalf("retransmitted CREATE after the reload: %v %x, want the cached reply OK %x", again.Status, again.Object, made.Object)
	}
	res, err := nc.Create(cctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: rootA, Name: "late"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	want(t, "new CREATE in removed a", res.Status, err, nfs3.ErrStale)
	rootB := root(b)
	write("b/f in the added export", lookup(rootB, "f"), nfs3.OK)
	write("c/f once c is rw", fC, nfs3.OK)
	getattr("d/f once 127.0.0.1 is not listed", fD, nfs3.ErrAcces)
	if st := mnt(d).Status; st != mount3.ErrAcces {
		t.Fatalf("MNT %s once 127.0.0.1 is not listed: %v, want MNT3ERR_ACCES", d, st)
	}
	getattr("the command line's export", root(s.export), nfs3.OK)

	// A file that does not parse: reported with its line, nothing changes.
	out = s.hup(t, file, fmt.Sprintf("# comment\n%s *(rw,bogus)\n", b))
	if w := file + `:2: unknown export option \"bogus\"`; !strings.Contains(out, w) || !strings.Contains(out, "stay as they were") {
		t.Errorf("bad file's reload log line %q: want it to name %q and say the exports stay", out, w)
	}
	write("b/f after a bad file", lookup(rootB, "f"), nfs3.OK)
	write("c/f after a bad file", fC, nfs3.OK)
	getattr("d/f after a bad file", fD, nfs3.ErrAcces)
	getattr("a/f after a bad file", fA, nfs3.ErrStale)
	// A directory that cannot be exported: the same.
	out = s.hup(t, file, fmt.Sprintf("%s *(rw)\n%s/missing *(rw)\n", b, b))
	if !strings.Contains(out, "missing") || !strings.Contains(out, "stay as they were") {
		t.Errorf("missing directory's reload log line %q", out)
	}
	write("b/f after a missing directory", lookup(rootB, "f"), nfs3.OK)
	write("c/f after a missing directory", fC, nfs3.OK)

	// a exported again: its old handles name its files again.
	out = s.hup(t, file, fmt.Sprintf("%s 127.0.0.1(rw,no_root_squash)\n%s *(rw,no_root_squash)\n", a, b))
	if !strings.Contains(out, "added=["+a+"]") || !strings.Contains(out, "removed=\"["+c+" "+d+"]\"") {
		t.Errorf("reload log line %q", out)
	}
	getattr("a/f once a is exported again", fA, nfs3.OK)
	getattr("c/f once c is removed", fC, nfs3.ErrStale)

	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections were made for 2 clients: a reload closed one", n)
	}
	s.stop()
	if b, _ := os.ReadFile(s.logPath); !strings.Contains(string(b), "msg=stopped") {
		t.Fatalf("no clean shutdown on SIGTERM after the reloads:\n%s", tail(s.logPath, 20))
	}
}

// TestServeReloadSNFSOpen: a protocol client has a file of an export open
// with caching enabled when a reload removes the export. The server calls it
// back (INVALIDATE: it must stop answering from its cache), its calls on the
// file are NFS3ERR_STALE, and its CLOSE is accepted: the open ends in the
// table, so that once the export is back another client's OPEN for writing
// calls nobody back.
func TestServeReloadSNFSOpen(t *testing.T) {
	t.Parallel()
	dirs := reloadDirs(t, "a")
	a := dirs["a"]
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(diskTempDir(t, "snfs-exports-"), "exports")
	line := a + " 127.0.0.1(rw,no_root_squash)\n"
	if err := os.WriteFile(file, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServeProc(t, "--exports", file)
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(name string, h client.CallbackHandler) *client.Session {
		t.Helper()
		ss, err := client.DialSession(cctx, "tcp", s.addr(), client.SessionConfig{Name: name, Handler: h, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Disconnect() })
		return ss
	}
	cbA := make(cbRecorder, 16)
	sa := dial("reload-a", cbA)
	res, err := sa.Mount().Mnt(cctx, a)
	if err != nil || res.Status != mount3.OK {
		t.Fatalf("MNT: %v %v", res, err)
	}
	rootA := res.FH
	var fh nfs3.FH
	for { // caching is enabled once the server's CB_NULL was answered
		var okr *snfs1.OpenOK
		fh, okr, err = sa.OpenName(cctx, rootA, "f", state.Read)
		if err != nil {
			t.Fatal(err)
		}
		if okr.CacheEnabled {
			break
		}
		if _, err := sa.Close(cctx, fh, state.Read, false); err != nil {
			t.Fatal(err)
		}
		if cctx.Err() != nil {
			t.Fatal("OPEN never enabled caching")
		}
		time.Sleep(20 * time.Millisecond)
	}

	s.hup(t, file, "# a is gone\n")
	select {
	case mode := <-cbA:
		if mode != state.Invalidate {
			t.Fatalf("callback %v after the export was removed, want INVALIDATE", mode)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no callback to the client caching a file of the removed export")
	}
	ga, err := sa.NFS().Getattr(cctx, fh)
	want(t, "GETATTR of the open file after the reload", ga.Status, err, nfs3.ErrStale)
	if _, err := sa.Open(cctx, fh, state.Read); !isStatus(err, nfs3.ErrStale) {
		t.Fatalf("OPEN of a removed export's file: %v, want NFS3ERR_STALE", err)
	}
	if _, err := sa.Close(cctx, fh, state.Read, false); err != nil {
		t.Fatalf("CLOSE of a removed export's file: %v, want it accepted", err)
	}

	s.hup(t, file, line)
	sb := dial("reload-b", nil)
	fhB, _, err := sb.OpenName(cctx, rootA, "f", state.Write)
	if err != nil {
		t.Fatalf("OPEN for writing once the export is back: %v", err)
	}
	if string(fhB) != string(fh) {
		t.Fatalf("the file's handle changed over the reloads")
	}
	select {
	case mode := <-cbA:
		t.Fatalf("callback %v to a client that closed the file: its open outlived its CLOSE", mode)
	case <-time.After(500 * time.Millisecond):
	}
}

// isStatus reports whether err is a session call's answer st.
func isStatus(err error, st nfs3.Status) bool {
	se, ok := err.(*client.StatusError)
	return ok && se.Status == st
}

// TestReloadUnderLoad: an in-process server reloads its exports 60 times
// (the second export rw, ro, gone, in turn) while two clients call it on
// files of that export without pause. Every answer is one the exports in
// force could give (OK, ROFS, STALE; never NFS3ERR_IO from a descriptor
// closed under a call), no connection is made again, and after each reload
// the next call gets the new exports' answer. Run with -race for the swap of
// the export table and options.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	dirs := reloadDirs(t, "x")
	x := dirs["x"]
	e := newEnv(t, "rw,no_root_squash")
	rw, _ := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	ro, _ := server.ParseOptions(server.DefaultOptions, "ro,no_root_squash")
	served := e.cfg.Exports[0]
	withX := func(o server.Options) []server.ExportConfig {
		return []server.ExportConfig{served, {Path: x, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}
	}
	if _, err := e.srv.Reload(withX(rw)); err != nil {
		t.Fatal(err)
	}
	mc, err := client.DialMount(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	mres, err := mc.Mnt(ctx, x)
	if err != nil || mres.Status != mount3.OK {
		t.Fatalf("MNT %s: %v %v", x, mres, err)
	}
	rootX := mres.FH

	var dials, rounds atomic.Int32
	stop := make(chan struct{})
	errc := make(chan error, 2)
	for w := 0; w < 2; w++ {
		c, err := client.DialNFS(ctx, "tcp", e.addr,
			sunrpc.WithOnConnect(func(context.Context, *sunrpc.Conn) error { dials.Add(1); return nil }))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func(w int) {
			allowed := func(what string, st nfs3.Status, err error, more ...nfs3.Status) error {
				if err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				for _, a := range append(more, nfs3.OK, nfs3.ErrStale) {
					if st == a {
						return nil
					}
				}
				return fmt.Errorf("%s: %v, not an answer of any exports in force", what, st)
			}
			mode := uint32(0o644)
			for i := 0; ; i++ {
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
				rounds.Add(1)
				name := fmt.Sprintf("w%d-%d", w, i)
				cr, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: rootX, Name: name}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode}})
				if err := allowed("CREATE", cr.Status, err, nfs3.ErrROFS); err != nil {
					errc <- err
					return
				}
				lr, err := c.Lookup(ctx, rootX, fmt.Sprintf("w%d-%d", w, i/2))
				if err := allowed("LOOKUP", lr.Status, err, nfs3.ErrNoEnt); err != nil {
					errc <- err
					return
				}
				if lr.Status != nfs3.OK {
					continue
				}
				wr, err := c.Write(ctx, lr.Object, 0, []byte("data"), nfs3.Unstable)
				if err := allowed("WRITE", wr.Status, err, nfs3.ErrROFS); err != nil {
					errc <- err
					return
				}
				rr, err := c.Read(ctx, lr.Object, 0, 4)
				if err := allowed("READ", rr.Status, err); err != nil {
					errc <- err
					return
				}
				ga, err := c.Getattr(ctx, lr.Object)
				if err := allowed("GETATTR", ga.Status, err); err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	states := []struct {
		exports []server.ExportConfig
		write   nfs3.Status
	}{{withX(ro), nfs3.ErrROFS}, {[]server.ExportConfig{served}, nfs3.ErrStale}, {withX(rw), nfs3.OK}}
	for i := 0; i < 60; i++ {
		st := states[i%len(states)]
		if _, err := e.srv.Reload(st.exports); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		sa, err := e.nfs.Setattr(ctx, &nfs3.SetattrArgs{Object: rootX, New: nfs3.Sattr{Mode: u32p(0o777)}})
		want(t, fmt.Sprintf("SETATTR after reload %d", i), sa.Status, err, st.write)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	for w := 0; w < 2; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections for 2 clients: a reload closed one", n)
	}
	t.Logf("%d rounds of calls during 60 reloads", rounds.Load())
}

// TestServeReloadSNFSMount: an snfs-mode `snfs mount` (write-back delay of
// an hour) of an export across reloads of `snfs serve`: made read-only, an
// open for writing fails with EROFS; removed, opening a file fails with ESTALE
// ("Stale file handle") and so does listing the mount; exported again, the
// same mount reads and writes again; data written and closed but not yet
// written back when the export is removed reaches the server before the
// removal; the mount unmounts cleanly.
func TestServeReloadSNFSMount(t *testing.T) {
	t.Parallel()
	dirs := reloadDirs(t, "a", "b")
	a, b := dirs["a"], dirs["b"]
	file := filepath.Join(diskTempDir(t, "snfs-exports-"), "exports")
	rw := a + " 127.0.0.1(rw,no_root_squash)\n"
	if err := os.WriteFile(file, []byte(rw), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServeProc(t, "--exports", file)
	// f and g are the server's (serverFiles): a file the mount made under
	// its write-back permit would be in its log, not yet on the server,
	// when the export turns read-only (its CREATE then refused: a
	// conflict) or is removed.
	for _, n := range []string{"f", "g"} {
		if err := os.WriteFile(filepath.Join(a, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startProcMount(t, snfsBinary(t), "127.0.0.1:"+a, append(portArgs(s.nfsPort, s.mountPort),
		"--mode=snfs", "--writeback-delay=1h", "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)
	writeSync := func(data string) error {
		f, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := writeSync("one\n"); err != nil {
		t.Fatal(err)
	}

	s.hup(t, file, a+" 127.0.0.1(ro,no_root_squash)\n")
	// The open itself fails: the reload called the mount back, so the
	// delayed close that kept f open for writing is over.
	if f, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, syscall.EROFS) {
		if err == nil {
			f.Close()
		}
		t.Fatalf("open for writing once the export is read-only: %v, want EROFS; the mount's log:\n%s", err, m.log.String())
	}
	if got, err := os.ReadFile(m.path("f")); err != nil || string(got) != "one\n" {
		t.Fatalf("read on the read-only export: %q %v", got, err)
	}

	s.hup(t, file, b+" 127.0.0.1(rw,no_root_squash)\n")
	if _, err := os.ReadFile(m.path("f")); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read once the export is removed: %v, want ESTALE", err)
	}
	if _, err := os.ReadDir(m.dir); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("listing once the export is removed: %v, want ESTALE", err)
	}

	s.hup(t, file, rw)
	if err := writeSync("three\n"); err != nil {
		t.Fatalf("append once the export is back: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(a, "f")); err != nil || string(got) != "one\nthree\n" {
		t.Fatalf("the server's file: %q %v, want \"one\\nthree\\n\"", got, err)
	}

	// Closed dirty: only in the mount's cache when the export is removed.
	if err := os.WriteFile(m.path("g"), []byte("cached\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(a, "g")); err != nil || fi.Size() != 0 {
		t.Fatalf("g on the server before its write-back: %v %v, want it empty", fi, err)
	}
	s.hup(t, file, b+" 127.0.0.1(rw,no_root_squash)\n")
	if got, err := os.ReadFile(filepath.Join(a, "g")); err != nil || string(got) != "cached\n" {
		t.Fatalf("the server's g once the export is removed: %q %v, want the data the mount had not written back; the mount's log:\n%s",
			got, err, m.log.String())
	}
	s.hup(t, file, rw)
	m.stop(t)
}

// TestServeReloadUnmount: an export on its own file system (a tmpfs mounted
// for the test) is read, listed and written by a client, then removed by a
// reload: the file system can be unmounted at once (exportfs -u; umount), the
// server holds nothing of it, and goes on serving its other export.
func TestServeReloadUnmount(t *testing.T) {
	t.Parallel()
	dirs := reloadDirs(t, "fs")
	fsDir := dirs["fs"]
	if err := syscall.Mount("snfs-test", fsDir, "tmpfs", 0, "size=16m,mode=0777"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			syscall.Unmount(fsDir, syscall.MNT_DETACH)
		}
	})
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(filepath.Join(fsDir, fmt.Sprintf("f%d", i)), []byte("data"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(diskTempDir(t, "snfs-exports-"), "exports")
	if err := os.WriteFile(file, []byte(fsDir+" 127.0.0.1(rw,no_root_squash)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServeProc(t, "--exports", file)
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mc, err := client.DialMount(cctx, "tcp", s.mountAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	nc, err := client.DialNFS(cctx, "tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	res, err := mc.Mnt(cctx, fsDir)
	if err != nil || res.Status != mount3.OK {
		t.Fatalf("MNT: %v %v", res, err)
	}
	ents, err := nc.ReadDirAll(cctx, res.FH, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name, "f") {
			continue
		}
		lr, err := nc.Lookup(cctx, res.FH, ent.Name)
		ok(t, "LOOKUP", lr.Status, err)
		rr, err := nc.Read(cctx, lr.Object, 0, 4)
		ok(t, "READ", rr.Status, err)
		wr, err := nc.Write(cctx, lr.Object, 0, []byte("new!"), nfs3.Unstable)
		ok(t, "WRITE", wr.Status, err)
	}
	// A listing left unfinished keeps its directory open between calls.
	rd, err := nc.Readdir(cctx, &nfs3.ReaddirArgs{Dir: res.FH, Count: 256})
	ok(t, "READDIR", rd.Status, err)

	s.hup(t, file, "")
	if err := syscall.Unmount(fsDir, 0); err != nil {
		t.Fatalf("umount of the removed export's file system: %v (the server still holds it)", err)
	}
	mounted = false
	ga, err := nc.Getattr(cctx, res.FH)
	want(t, "GETATTR of the removed export's root", ga.Status, err, nfs3.ErrStale)
	rr, err := mc.Mnt(cctx, s.export)
	if err != nil || rr.Status != mount3.OK {
		t.Fatalf("MNT of the command line's export: %v %v", rr, err)
	}
}
