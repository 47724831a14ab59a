package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedBuild is issue 26's "disconnection for minutes with
// an untar and a build running, then reconnection, 0 lost", as a user
// lives it: the server stays up, other clients go on working, and one
// mount's network goes silent (a partition: the proxy holds every byte)
// for minutes, long past the callback timeout and the lease.
//
// Mount A (--disconnected=auto) lists its directory, then is cut off; an
// uncached lookup in flight fails EHOSTDOWN once it is offline. Offline,
// A extracts the Lua tarball and builds it with make, then, until the
// disconnection has lasted offFor, edits a source and builds again, with
// a `make clean` every third round, an editor's save (write, fsync,
// rename over) and a directory made and removed each round. Meanwhile
// another snfs mount makes files in its own directory and names in the
// root (breaking A's directory promise there: the server's callback to A
// times out), and a process on the server does the same in its own
// directory. When the partition heals, A reintegrates: the export's tree
// must become exactly A's offline tree (names, bytes, modes, owners, and
// mtimes but directories', which get the times the server applied their
// changes; copied aside before the heal), with no conflict recorded (none
// was made), every file the others wrote still there, and the lua binary
// built offline must run on the server.
//
// SNFS_OFFLINE_FOR sets how long the partition lasts (default 2m).
func TestMountDisconnectedBuild(t *testing.T) {
	t.Parallel()
	requireLong(t)
	tb := luaTarball()
	if tb == "" {
		t.Skip("no Lua tarball in this checkout (../shared/data/lua-5.4.8.tar.gz; SNFS_LUA_TARBALL)")
	}
	tb, err := filepath.Abs(tb) // tar runs in the mount
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"tar", "make", "gcc", "cp"} {
		if _, err := exec.LookPath(prog); err != nil {
			requireInCI(t, prog+" is not installed")
		}
	}
	offFor := 2 * time.Minute
	if v := os.Getenv("SNFS_OFFLINE_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SNFS_OFFLINE_FOR=%q: a duration: %v", v, err)
		}
		offFor = d
	}
	const after = 2 * time.Second
	s := newServeProc(t, "--callback-timeout", "2s", "--grace", "2s")
	p := newProxy(t, s.addr())
	for _, d := range []string{"work", "b", "l", "sub"} {
		if err := os.Mkdir(s.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.path("sub/uncached"), []byte("never looked up by mount A"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newMnt(t, "", "")
	a.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a.launch(s, p.Port(), "--log-level", "debug", "--metrics", a.metrics,
		"--disconnected=auto", "--disconnect-after="+after.String())
	t.Cleanup(func() {
		p.Heal()
		if t.Failed() {
			t.Logf("log of mount A on %s (tail):\n%s", a.dir, tail(a.logPath, 80))
		}
	})
	t.Cleanup(a.umount)
	b := startMount(t, s, "", "")

	for _, d := range []string{"", "work"} {
		if _, err := os.ReadDir(a.path(d)); err != nil { // listings kept offline
			t.Fatal(err)
		}
	}
	p.Partition(0)
	parted := time.Now()
	err, d := timedErr(t, "stat of an uncached file across the partition", after+30*time.Second, func() error {
		_, err := os.Stat(a.path("sub/uncached"))
		return err
	}, a.goroutines)
	if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("stat in flight across the partition: %v after %v; want EHOSTDOWN once the mount is offline", err, d)
	}
	waitMetric(t, a, "snfs_client_disconnected", 1, 10*time.Second)

	// The others work while A is away.
	others := &buildOthers{files: map[string][]byte{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); others.run(stop, "b", b.path, true) }()
	go func() { defer wg.Done(); others.run(stop, "l", s.path, false) }()
	defer func() { // on a t.Fatal below too
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	work := a.path("work")
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("offline, %s: %v\n%s\n%s", strings.Join(args, " "), err, lastLines(string(out), 20), tail(a.logPath, 40))
		}
	}
	run(work, "tar", "-xzf", tb)
	src := filepath.Join(work, "lua-5.4.8")
	// Without readline, which the makefile asks for and CI does not install.
	build := []string{"make", "MYCFLAGS=-std=c99 -DLUA_USE_LINUX", "MYLIBS=-ldl"}
	run(src, build...)
	rounds := 1
	for time.Since(parted) < offFor {
		if rounds%3 == 0 {
			run(src, "make", "clean")
		}
		f, err := os.OpenFile(filepath.Join(src, "lapi.c"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(f, "/* offline round %d */\n", rounds)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("offline edit of lapi.c: %v", err)
		}
		notes := filepath.Join(work, "NOTES")
		if err := writeSynced(notes+".tmp", []byte(fmt.Sprintf("round %d at %v\n", rounds, time.Since(parted).Round(time.Second)))); err != nil {
			t.Fatalf("offline save of NOTES: %v", err)
		}
		if err := os.Rename(notes+".tmp", notes); err != nil {
			t.Fatalf("offline rename over NOTES: %v", err)
		}
		tmpd := filepath.Join(work, fmt.Sprintf("tmp%d", rounds))
		if err := os.Mkdir(tmpd, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmpd, "x"), []byte("scratch"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(tmpd); err != nil {
			t.Fatal(err)
		}
		run(src, build...)
		rounds++
	}
	close(stop)
	wg.Wait()
	if v, _ := metricSum(a.metrics, "snfs_client_disconnected"); v != 1 {
		t.Fatalf("mount A came online during the partition (disconnected %v)", v)
	}
	if others.err != nil {
		t.Fatalf("the other clients, meanwhile: %v", others.err)
	}
	// What A's applications were told exists, as A shows it offline.
	want := diskTempDir(t, "snfs-build-want")
	run(work, "cp", "-a", ".", want)
	t.Logf("offline for %v: %d build rounds; the others made %d files", time.Since(parted).Round(time.Second), rounds, len(others.files))
	if got, _ := exportFiles(s.path("work")); len(got) != 0 {
		t.Fatalf("the export's work changed while A was cut off: %d files", len(got))
	}

	p.Heal()
	healed := time.Now()
	waitMetric(t, a, "snfs_client_disconnected", 0, 60*time.Second)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		d := treeMetaOf(t, want, s.path("work"), false)
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the export's work differs from mount A's offline tree:\n%s", d)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the export holds A's offline tree %v after the heal", time.Since(healed).Round(time.Millisecond))
	if c := conflictLines(a); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
	// Mount B's last files may still be in its modification log (a
	// close under its permit is acknowledged once logged on its disk):
	// its unmount reintegrates them.
	b.umount()
	for name, data := range others.files {
		if got, err := os.ReadFile(s.path(name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the export's %s (written by another client while A was away): %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	// The server gives up its writable descriptor of a file idle for a
	// moment (store/idlewrite.go); until then exec(2) is ETXTBSY.
	execDeadline := time.Now().Add(15 * time.Second)
	for {
		out, err := command(s.path("work/lua-5.4.8/lua"), "-e", "print(6*7)").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "42" {
			break
		}
		// The spawner (spawn_test.go) gives exec's error as text.
		busy := errors.Is(err, syscall.ETXTBSY) || err != nil && strings.Contains(err.Error(), "text file busy")
		if !busy || time.Now().After(execDeadline) {
			t.Fatalf("the lua built offline, run on the server: %q, %v", out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// And A reads what the server holds.
	for _, rel := range []string{"lua-5.4.8/lapi.c", "NOTES", "lua-5.4.8/lua"} {
		w := mustRead(t, filepath.Join(want, rel))
		if got := mustRead(t, filepath.Join(work, rel)); !bytes.Equal(got, w) {
			t.Fatalf("mount A's %s online: %d bytes; want %d", rel, len(got), len(w))
		}
	}
}

// buildOthers: what the other clients acknowledged while mount A was away.
type buildOthers struct {
	mu    sync.Mutex
	files map[string][]byte // export-relative name: bytes whose close returned
	err   error             // the first failure
}

// run makes a file in dir every few hundred milliseconds (through path, a
// mount's or the server's own), and, with names, a name in the root made
// and removed every fifth one, until stop.
func (o *buildOthers) run(stop <-chan struct{}, dir string, path func(string) string, names bool) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(300 * time.Millisecond):
		}
		name := fmt.Sprintf("%s/f%d", dir, n)
		data := []byte(strings.Repeat(name+" ", 100+n))
		err := writeSynced(path(name), data)
		if err == nil && names && n%5 == 0 {
			root := path(fmt.Sprintf("%s-root%d", dir, n))
			if err = os.Mkdir(root, 0o755); err == nil {
				err = os.Remove(root)
			}
		}
		o.mu.Lock()
		if err != nil && o.err == nil {
			o.err = fmt.Errorf("%s: %w", name, err)
		}
		if err == nil {
			o.files[name] = data
		}
		o.mu.Unlock()
		if err != nil {
			return
		}
	}
}
