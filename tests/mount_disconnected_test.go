package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/state/clientfile"
)

// Disconnected operation (docs/mount.md, "Disconnected operation"): a real
// `snfs serve` process killed and started again under a real
// `snfs mount --mode=snfs` process.

// waitMetric waits up to d for the mount's metric name to be want.
func waitMetric(t *testing.T, m *mntProc, name string, want float64, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		v, err := metricSum(m.metrics, name)
		if err == nil && v == want {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s is %v (err %v) after %v; want %v\n%s", name, v, err, d, want, tail(m.logPath, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// timedErr runs f on its own goroutine and returns its error and how long
// it took; a call that has not returned after limit fails the test (it is
// left to return when the test's cleanups kill the mount).
// At the bound it fails the test with what the diags say (where the mount
// is: its goroutines).
func timedErr(t *testing.T, what string, limit time.Duration, f func() error, diags ...func() string) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(limit):
		for _, d := range diags {
			t.Log(d())
		}
		t.Fatalf("%s: still waiting after %v (want an answer from the cache, or its error, at once)", what, limit)
		return nil, 0
	}
}

// TestMountDisconnectedAuto: with --disconnected=auto, the server killed,
// the mount goes offline within the bound; a cached file reads right, an
// uncached one and a create fail at once with EHOSTDOWN, writes (and an
// fsync) to cached files succeed into the cache. With the server back, the
// mount comes online and writes back: the file nobody else touched reaches
// the server whole; the file changed on the server meanwhile keeps the
// server's version and ours goes beside it as a conflict copy, listed by
// `snfs conflicts` with the reason "disconnected".
func TestMountDisconnectedAuto(t *testing.T) {
	t.Parallel()
	const after = 2 * time.Second
	s := newServeProc(t, "--grace", "3s")
	// Made on the server before the mount: read through it into its cache.
	clean := randBytes(401, 150000)
	if err := os.WriteFile(s.path("clean"), clean, 0o644); err != nil {
		t.Fatal(err)
	}
	// In a directory the mount never lists (a name of a listing the mount
	// has is served offline: TestMountDisconnectedListing).
	if err := os.Mkdir(s.path("sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("sub/uncached"), []byte("never read by the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after="+after.String(), "--log-level=debug")
	if got := mustRead(t, m.path("clean")); !bytes.Equal(got, clean) {
		t.Fatalf("the mount reads %d bytes of clean, want %d", len(got), len(clean))
	}
	// Written through the mount and fsynced (on the server), then closed:
	// cached, their opens kept past the close (--close-delay's default).
	mine0, theirs0 := randBytes(402, 100000), randBytes(403, 80000)
	for name, data := range map[string][]byte{"mine": mine0, "theirs": theirs0} {
		f, err := os.OpenFile(m.path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// Not read on the server now: a local process's open would call
		// the mount back and take its kept open, and an open while
		// offline needs a kept (or held) one.
	}
	waitMetric(t, m, "snfs_client_disconnected", 0, time.Second)

	killed := time.Now()
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	// Offline within the bound (and the loop's probe period past it).
	waitMetric(t, m, "snfs_client_disconnected", 1, after+10*time.Second)
	t.Logf("offline %v after the server was killed (bound %v)", time.Since(killed).Round(time.Millisecond), after)
	if b, _ := os.ReadFile(m.logPath); !strings.Contains(string(b), "server unreachable: disconnected, serving the cache") {
		t.Errorf("the mount's log lacks the WARN of going offline:\n%s", tail(m.logPath, 20))
	}
	out, err := command(snfsBinary(t), "status", m.dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "disconnected since") {
		t.Errorf("snfs status %s: %v\n%s\n(want \"disconnected since\")", m.dir, err, out)
	}

	// What is cached is served.
	var got []byte
	err, d := timedErr(t, "read of a cached file offline", 10*time.Second, func() (err error) {
		got, err = os.ReadFile(m.path("clean"))
		return err
	})
	if err != nil || !bytes.Equal(got, clean) {
		t.Fatalf("offline read of clean: %d bytes, %v (in %v); want %d bytes", len(got), err, d, len(clean))
	}
	// What is not fails at once, EHOSTDOWN.
	err, d = timedErr(t, "stat of an uncached file offline", 10*time.Second, func() error {
		_, err := os.Stat(m.path("sub/uncached"))
		return err
	})
	t.Logf("stat of an uncached file offline: %v in %v", err, d.Round(time.Millisecond))
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Errorf("stat of an uncached file offline: %v; want EHOSTDOWN", err)
	}
	err, d = timedErr(t, "create offline", 10*time.Second, func() error {
		return os.WriteFile(m.path("sub/new"), []byte("x"), 0o644)
	})
	t.Logf("create offline: %v in %v", err, d.Round(time.Millisecond))
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Errorf("create offline in a directory never listed: %v; want EHOSTDOWN (changes are made offline only in listings the mount has: TestMountDisconnectedUntar)", err)
	}

	// Writes to cached files, fsynced and closed: into the cache.
	mine1, theirs1 := randBytes(404, 30000), randBytes(405, 20000)
	for name, data := range map[string][]byte{"mine": mine1, "theirs": theirs1} {
		err, d := timedErr(t, "write to "+name+" offline", 10*time.Second, func() error {
			f, err := os.OpenFile(m.path(name), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(data, 5000); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		})
		if err != nil {
			t.Fatalf("write, fsync and close of %s offline: %v (in %v)", name, err, d)
		}
	}
	wantMine := append([]byte{}, mine0...)
	copy(wantMine[5000:], mine1)
	wantTheirs := append([]byte{}, theirs0...)
	copy(wantTheirs[5000:], theirs1)
	if got := mustRead(t, m.path("mine")); !bytes.Equal(got, wantMine) {
		t.Fatalf("offline, the mount reads %d bytes of mine, not what it wrote", len(got))
	}
	// Meanwhile, on the server's disk (a process there): theirs changed.
	server := randBytes(406, 60000)
	if err := os.WriteFile(s.path("theirs"), server, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := s.startErr(); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 0, 30*time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for {
		mineNow, _ := os.ReadFile(s.path("mine"))
		copies, _ := filepath.Glob(s.path("theirs.snfs-conflict-*"))
		var c []byte
		if len(copies) == 1 {
			c, _ = os.ReadFile(copies[0]) // made, then written: wait for all of it
		}
		if bytes.Equal(mineNow, wantMine) && len(copies) == 1 && bytes.Equal(c, wantTheirs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: the export's mine has %d bytes (want %d, equal: %v); conflict copies of theirs: %v (%d bytes, want the mount's %d)\n%s",
				len(mineNow), len(wantMine), bytes.Equal(mineNow, wantMine), copies, len(c), len(wantTheirs), tail(m.logPath, 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := mustRead(t, s.path("theirs")); !bytes.Equal(got, server) {
		t.Fatalf("the server's theirs has %d bytes; want the server's own %d, left alone", len(got), len(server))
	}
	waitConflictListed(t, m.cacheDir, deadline, "theirs.snfs-conflict-", "disconnected")
	if b, _ := os.ReadFile(m.logPath); !strings.Contains(string(b), "server reachable again") {
		t.Errorf("the mount's log lacks the INFO of coming back:\n%s", tail(m.logPath, 20))
	}
	// Online again: what was not cached is served.
	if _, err := os.Stat(m.path("sub/uncached")); err != nil {
		t.Fatalf("stat of uncached after reconnection: %v", err)
	}
}

// TestMountDisconnectedNever: without --disconnected=auto (never, the
// default), a call waits for the server, as a hard mount's: a stat of an
// uncached file with the server killed is still waiting after well past
// the bound auto would use, and returns once the server is back.
func TestMountDisconnectedNever(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "3s")
	if err := os.WriteFile(s.path("uncached"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnect-after=1s")
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(m.path("uncached"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("stat with the server killed returned %v; want it to wait for the server (--disconnected=never)", err)
	case <-time.After(4 * time.Second):
	}
	if v, err := metricSum(m.metrics, "snfs_client_disconnected"); err != nil || v != 0 {
		t.Errorf("snfs_client_disconnected %v (%v); want 0 (never goes offline)", v, err)
	}
	if err := s.startErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stat once the server is back: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stat still waiting 60 s after the server came back")
	}
}

// TestMountDisconnectedPartition: the server stays up but the mount's
// connection goes silent (a partition: the proxy holds every byte). A call
// in flight as it begins (a lookup of an uncached name) is cut when the
// mount goes offline, with EHOSTDOWN; writes to cached files go on into the
// cache. Meanwhile a process on the server changes one of them (the
// server's callback to the mount times out: the mount is fenced for it).
// After the partition heals, the other file's data reaches the server and
// the changed one is kept beside the server's version, reason
// "disconnected".
func TestMountDisconnectedPartition(t *testing.T) {
	t.Parallel()
	const after = 2 * time.Second
	s := newServeProc(t, "--callback-timeout", "2s")
	p := newProxy(t, s.addr())
	// In a directory the mount never lists (the root's listing, cached
	// under a promise, would answer for a name in it until its lease ends).
	if err := os.Mkdir(s.path("sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("sub/uncached"), []byte("never looked up by the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newMnt(t, "", "")
	m.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m.launch(s, p.Port(), "--writeback-delay", "1h", "--log-level", "debug", "--metrics", m.metrics,
		"--disconnected=auto", "--disconnect-after="+after.String())
	t.Cleanup(func() {
		p.Heal()
		if t.Failed() {
			t.Logf("log of the mount on %s (tail):\n%s", m.dir, tail(m.logPath, 60))
		}
	})
	t.Cleanup(m.umount)

	mine0, shared0 := randBytes(411, 90000), randBytes(412, 70000)
	for name, data := range map[string][]byte{"mine": mine0, "shared": shared0} {
		f, err := os.OpenFile(m.path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}

	p.Partition(0)
	parted := time.Now()
	// In flight as the partition begins: waits until the mount goes
	// offline, then fails.
	err, d := timedErr(t, "stat of an uncached file across the partition", after+15*time.Second, func() error {
		_, err := os.Stat(m.path("sub/uncached"))
		return err
	}, m.goroutines)
	t.Logf("stat in flight across the partition: %v after %v (bound %v)", err, d.Round(time.Millisecond), after)
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("stat in flight across the partition: %v; want EHOSTDOWN once the mount is offline", err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 1, 10*time.Second)
	t.Logf("offline %v after the partition began", time.Since(parted).Round(time.Millisecond))

	mine1, shared1 := randBytes(413, 20000), randBytes(414, 10000)
	for name, data := range map[string][]byte{"mine": mine1, "shared": shared1} {
		err, d := timedErr(t, "write to "+name+" offline", 10*time.Second, func() error {
			f, err := os.OpenFile(m.path(name), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(data, 1000); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		})
		if err != nil {
			t.Fatalf("write, fsync and close of %s offline: %v (in %v)", name, err, d)
		}
	}
	// A process on the server changes shared: its callback to the mount
	// times out, the mount is fenced for it.
	server := randBytes(415, 50000)
	if err := os.WriteFile(s.path("shared"), server, 0o644); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	waitMetric(t, m, "snfs_client_disconnected", 0, 30*time.Second)

	wantMine := append([]byte{}, mine0...)
	copy(wantMine[1000:], mine1)
	wantShared := append([]byte{}, shared0...)
	copy(wantShared[1000:], shared1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		mineNow, _ := os.ReadFile(s.path("mine"))
		copies, _ := filepath.Glob(s.path("shared.snfs-conflict-*"))
		var c []byte
		if len(copies) == 1 {
			c, _ = os.ReadFile(copies[0])
		}
		if bytes.Equal(mineNow, wantMine) && len(copies) == 1 && bytes.Equal(c, wantShared) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the partition: the export's mine has %d bytes (want %d, equal: %v); conflict copies of shared: %v (%d bytes, want the mount's %d)",
				len(mineNow), len(wantMine), bytes.Equal(mineNow, wantMine), copies, len(c), len(wantShared))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := mustRead(t, s.path("shared")); !bytes.Equal(got, server) {
		t.Fatalf("the server's shared has %d bytes; want the server's own %d, left alone", len(got), len(server))
	}
	waitConflictListed(t, m.cacheDir, deadline, "shared.snfs-conflict-", "disconnected")
}

// TestMountDisconnectedInProcess is TestMountDisconnectedPartition's
// partition with the mount in this process (so that -race watches the
// cache manager's disconnected operation): an in-flight stat cut with
// EHOSTDOWN, a cached file read, written and fsynced offline, the status
// showing it, and after the heal its data on the server.
func TestMountDisconnectedInProcess(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	const after = time.Second
	e := newEnv(t, "rw,no_root_squash")
	p := newProxy(t, e.addr)
	logBuf := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	t.Cleanup(func() { // after the unmount (cleanups run last first): its log too
		if t.Failed() {
			t.Logf("mount log:\n%s", logBuf)
		}
	})
	m := newSNFSMountWith(t, e, "A", "", snfsmount.Config{Addr: p.Addr(), WriteBackDelay: time.Hour,
		CloseDelay: clientfile.UntilRecalled, Logger: log, NoNameCache: true, Disconnected: true, DisconnectAfter: after},
		fusefs.Options{})
	dir, v := m.dir, m.v
	t.Cleanup(p.Heal) // before the unmount: its write-back needs the server
	data0 := randBytes(421, 50000)
	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	p.Partition(0)
	err, d := timedErr(t, "stat across the partition", after+15*time.Second, func() error {
		_, err := os.Stat(filepath.Join(dir, "not-there"))
		return err
	})
	t.Logf("stat in flight across the partition: %v after %v", err, d.Round(time.Millisecond))
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("stat in flight across the partition: %v; want EHOSTDOWN", err)
	}
	if at, off := cachemgr.DisconnectedSince(v); !off || at.IsZero() {
		t.Fatalf("DisconnectedSince: %v, %v; want offline", at, off)
	}
	if st, _ := cachemgr.StatusOf(v, 0); !st.Reach.Offline {
		t.Fatalf("status: %+v; want offline", st.Reach)
	}
	data1 := randBytes(422, 7000)
	f, err = os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open of a cached file offline: %v", err)
	}
	if _, err := f.WriteAt(data1, 300); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	want := append([]byte{}, data0...)
	copy(want[300:], data1)
	if got := mustRead(t, filepath.Join(dir, "f")); !bytes.Equal(got, want) {
		t.Fatalf("offline, the mount reads %d bytes of f, not what it wrote", len(got))
	}
	p.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _ := os.ReadFile(filepath.Join(e.dir, "f"))
		if bytes.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the heal the export's f has %d bytes, not the mount's %d", len(got), len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logBuf.String(), "server unreachable: disconnected, serving the cache") || !strings.Contains(logBuf.String(), "server reachable again") {
		t.Fatalf("the log lacks going offline or coming back")
	}
}

// TestMountDisconnectedOwedClose: mount A (--close-delay 0, through a
// proxy) holds a file open for reading across a partition and closes it
// while offline: its CLOSE cannot be sent then, and is sent when the
// partition heals. So the server does not go on counting A's open: mount
// B's later open for writing needs no callback to A (with A's read open
// still counted, the server would call A back first, and A would answer
// that it holds none).
func TestMountDisconnectedOwedClose(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--callback-timeout", "2s")
	p := newProxy(t, s.addr())
	if err := os.WriteFile(s.path("f"), randBytes(431, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newMnt(t, "", "")
	a.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a.launch(s, p.Port(), "--writeback-delay", "1h", "--close-delay", "0", "--log-level", "debug", "--metrics", a.metrics,
		"--disconnected=auto", "--disconnect-after=1s")
	t.Cleanup(func() {
		p.Heal()
		if t.Failed() {
			t.Logf("log of mount A (tail):\n%s", tail(a.logPath, 40))
		}
	})
	t.Cleanup(a.umount)
	b := newMountProc(t, s, s.nfsPort, time.Hour)

	f, err := os.Open(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(f); err != nil {
		t.Fatal(err)
	}
	p.Partition(0)
	waitMetric(t, a, "snfs_client_disconnected", 1, 15*time.Second)
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	// The release (and its CLOSE) follows the close asynchronously: its
	// CLOSE, refused offline, is owed.
	waitFileHas(t, a.logPath, "disconnected: CLOSE owed until reconnection", 10*time.Second)
	p.Heal()
	waitMetric(t, a, "snfs_client_disconnected", 0, 30*time.Second)
	waitFileHas(t, a.logPath, "CLOSEs owed since the disconnection sent", 10*time.Second) // the reconnection's CLOSEs
	before := s.metric("snfs_server_consist_callbacks_total")
	g, err := os.OpenFile(b.path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if n := s.metric("snfs_server_consist_callbacks_total") - before; n != 0 {
		t.Fatalf("B's open for writing made %v callbacks; want 0 (A's CLOSE, owed since it was offline, was sent)\nA: %s\nB: %s",
			n, tail(a.logPath, 15), tail(b.logPath, 10))
	}
	if l := string(mustRead(t, a.logPath)); !strings.Contains(l, "CLOSEs owed since the disconnection sent") {
		t.Fatal("A's log does not say its owed CLOSE was sent")
	}
}

// TestMountDisconnectedOnRequest: SIGUSR1 takes a --disconnected=auto mount
// offline while its server answers (an uncached name fails at once, a
// cached file is written into the cache); SIGUSR2 brings it back, and the
// data reaches the server.
func TestMountDisconnectedOnRequest(t *testing.T) {
	t.Parallel()
	s := newServeProc(t)
	if err := os.Mkdir(s.path("sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("sub/uncached"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// f is the server's: its fsync below writes it back (one the mount
	// made under its write-back permit would be durable in the cache
	// directory instead: serverFiles).
	if err := os.WriteFile(s.path("f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto")
	data0 := randBytes(441, 40000)
	f, err := os.OpenFile(m.path("f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if err := m.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 1, 10*time.Second)
	err, d := timedErr(t, "stat of an uncached name offline", 10*time.Second, func() error {
		_, err := os.Stat(m.path("sub/uncached"))
		return err
	})
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("stat of an uncached name offline on request: %v (in %v); want EHOSTDOWN", err, d)
	}
	data1 := randBytes(442, 3000)
	f, err = os.OpenFile(m.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open of a cached file offline: %v", err)
	}
	if _, err := f.WriteAt(data1, 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{}, data0...)
	copy(want[100:], data1)
	time.Sleep(time.Second) // still offline: nothing written back
	if got := mustRead(t, s.path("f")); !bytes.Equal(got, data0) {
		t.Fatalf("the export's f changed while the mount was offline on request")
	}
	if err := m.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 0, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, _ := os.ReadFile(s.path("f")); bytes.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's f does not have the mount's offline write 30 s after it came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMountDisconnectedRootSquash: offline, the server cannot say what a
// squashed root may do, and the kernel lets root through every mode check
// (default_permissions). Root's open for writing of a user's 0644 file held
// in a kept open, with no answer of the server's for root cached, fails
// EHOSTDOWN instead of taking writes whose write-back the server (which
// squashes root) would refuse after close acknowledged them. The owner's
// open, answered online, goes on offline.
func TestMountDisconnectedRootSquash(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--export-options", "rw,root_squash")
	if err := os.Mkdir(s.path("sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(s.path("sub"), 0o777)
	const owner = 65533
	if err := os.WriteFile(s.path("sub/u"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(s.path("sub/u"), owner, owner); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--log-level=debug")
	f := m.path("sub/u")
	if err := runAsUser(t, owner, owner, func() error { return os.WriteFile(f, []byte("owner online"), 0) }); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 1, 10*time.Second)
	if err := openClose(f, os.O_WRONLY); !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("root's open for writing of a user's 0644 file offline (root_squash): %v; want EHOSTDOWN", err)
	}
	if err := runAsUser(t, owner, owner, func() error { return os.WriteFile(f, []byte("owner offline"), 0) }); err != nil {
		t.Fatalf("the owner's write offline: %v\n%s", err, tail(m.logPath, 60))
	}
	if err := m.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 0, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _ := os.ReadFile(s.path("sub/u"))
		if string(got) == "owner offline" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's file: %q 30 s after reconnection; want the owner's offline write", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
