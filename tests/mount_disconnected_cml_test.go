package tests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Namespace changes while disconnected, through the modification log
// (docs/mount.md, "Disconnected operation"; issue 26 item 4): offline on
// request (SIGUSR1; the connection stays up, so a process on the server
// can change the export meanwhile), in a directory whose listing the mount
// has.

// luaTarball is the Lua 5.4.8 source tarball of the shared data, "" if
// this checkout has none.
func luaTarball() string {
	cands := []string{os.Getenv("SNFS_LUA_TARBALL"), "../../shared/data/lua-5.4.8.tar.gz", "../../../shared/data/lua-5.4.8.tar.gz"}
	if out, err := command("git", "rev-parse", "--path-format=absolute", "--git-common-dir").Output(); err == nil {
		cands = append(cands, filepath.Join(strings.TrimSpace(string(out)), "../../shared/data/lua-5.4.8.tar.gz"))
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

// offlineTree makes a tree under root (a path through the mount) as an
// untar does: directories, then each file created, written in pieces and
// closed. From the Lua tarball if there is one, else a seeded tree of the
// same shape. It returns the files by path relative to root.
func offlineTree(t *testing.T, root string, seed uint64) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	put := func(name string, data []byte) {
		f, err := os.OpenFile(filepath.Join(root, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatalf("create %s offline: %v", name, err)
		}
		for off := 0; off < len(data); off += 7000 {
			if _, err := f.Write(data[off:min(off+7000, len(data))]); err != nil {
				t.Fatalf("write %s offline: %v", name, err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close %s offline: %v", name, err)
		}
		files[name] = data
	}
	mkdir := func(name string) {
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatalf("mkdir %s offline: %v", name, err)
		}
	}
	tb := luaTarball()
	if tb == "" {
		t.Logf("no Lua tarball here: a seeded tree instead")
		rng := rand.New(rand.NewPCG(seed, 1))
		for d := range 4 {
			mkdir(fmt.Sprintf("d%d", d))
			for k := range 30 {
				put(fmt.Sprintf("d%d/f%d.c", d, k), randBytes(seed+uint64(d*100+k), 1+rng.IntN(60000)))
			}
		}
		return files
	}
	gz, err := os.Open(tb)
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeDir:
			mkdir(name)
		case tar.TypeReg:
			mkdir(filepath.Dir(name))
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			put(name, data)
		}
	}
	return files
}

// buildChurn does what a build does to its outputs, offline: each object
// written to a temporary name and renamed into place (some over an older
// one), some removed again. It updates files.
func buildChurn(t *testing.T, root string, files map[string][]byte, seed uint64) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(root, "obj"), 0o755); err != nil {
		t.Fatalf("mkdir obj offline: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	for k := range 60 {
		name := fmt.Sprintf("obj/m%d.o", k%40) // 20 of them made twice: the second replaces the first
		data := randBytes(seed+1000+uint64(k), 1+rng.IntN(40000))
		tmp := filepath.Join(root, name+".tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatalf("write %s.tmp offline: %v", name, err)
		}
		if err := os.Rename(tmp, filepath.Join(root, name)); err != nil {
			t.Fatalf("rename %s.tmp offline: %v", name, err)
		}
		files[name] = data
		if k%7 == 3 {
			if err := os.Remove(filepath.Join(root, name)); err != nil {
				t.Fatalf("remove %s offline: %v", name, err)
			}
			delete(files, name)
		}
	}
}

// exportFiles is every regular file under dir, by path relative to it.
func exportFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = b
		}
		return nil
	})
	return out, err
}

// treeDiff describes how got differs from want ("" if it does not).
func treeDiff(got, want map[string][]byte) string {
	var d []string
	for n, w := range want {
		g, ok := got[n]
		switch {
		case !ok:
			d = append(d, "missing "+n)
		case !bytes.Equal(g, w):
			d = append(d, fmt.Sprintf("%s: %d bytes, want %d (equal: false)", n, len(g), len(w)))
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			d = append(d, "extra "+n)
		}
	}
	if len(d) > 8 {
		d = append(d[:8], fmt.Sprintf("... %d more", len(d)-8))
	}
	return strings.Join(d, "; ")
}

// waitExport waits until the export's dir holds exactly want.
func waitExport(t *testing.T, m *mntProc, dir string, want map[string][]byte, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, err := exportFiles(dir)
		diff := treeDiff(got, want)
		if err == nil && diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's %s after reconnection: %v %s\n%s", dir, err, diff, tail(m.logPath, 60))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// conflictLines is the mount's conflicts file, a line each.
func conflictLines(m *mntProc) []string {
	b, _ := os.ReadFile(filepath.Join(m.cacheDir, "conflicts"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// waitConflictListed waits until `snfs conflicts --cache-dir` lists a
// conflict with every one of want in its line, and returns its output.
// A conflict copy is made, then written, then recorded (cachemgr's
// reintegrate.go): a test that saw the copy whole may ask before the
// record is there.
func waitConflictListed(t *testing.T, cacheDir string, deadline time.Time, want ...string) string {
	t.Helper()
	for {
		out, err := command(snfsBinary(t), "conflicts", "--cache-dir", cacheDir).CombinedOutput()
		if err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				all := true
				for _, w := range want {
					all = all && strings.Contains(l, w)
				}
				if all {
					return string(out)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("snfs conflicts --cache-dir %s: %v\n%s\n(want a conflict with %q)", cacheDir, err, out, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goOfflineReq takes m offline on request and waits for it.
func goOfflineReq(t *testing.T, m *mntProc) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 1, 20*time.Second)
}

// goOnlineReq brings m back online on request and waits for it.
func goOnlineReq(t *testing.T, m *mntProc) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, m, "snfs_client_disconnected", 0, 30*time.Second)
}

// TestMountDisconnectedUntar: offline, an untar of the Lua tree into a
// directory the mount has listed, a build's churn beside it (objects
// written to temporary names, renamed into place, some over older ones,
// some removed), and, with gcc here, a few of Lua's sources compiled in the
// tree: every change is made locally and logged. Reads offline give what
// was written. Back online, the export holds exactly what the
// applications were told was written (every byte, no name more or less),
// and no conflict is recorded: nothing conflicted. Offline on request (the
// connection up), and with the server killed (and started again: the
// reintegration meets a restarted server, its permits gone).
func TestMountDisconnectedUntar(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"request", "kill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			testDisconnectedUntar(t, how)
		})
	}
}

func testDisconnectedUntar(t *testing.T, how string) {
	seed := uint64(3701)
	if how == "kill" {
		seed = 3702
	}
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("work/old"), []byte("made before"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil { // its listing, kept offline
		t.Fatal(err)
	}
	if how == "kill" {
		if err := s.kill9(); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, m, "snfs_client_disconnected", 1, 20*time.Second)
	} else {
		goOfflineReq(t, m)
	}
	start := time.Now()
	files := offlineTree(t, m.path("work"), seed)
	buildChurn(t, m.path("work"), files, seed)
	if err := os.Remove(m.path("work/old")); err != nil {
		t.Fatalf("remove of a file the server made, offline: %v", err)
	}
	if tb := luaTarball(); tb != "" {
		if _, err := exec.LookPath("gcc"); err == nil {
			src := m.path("work/lua-5.4.8")
			for _, c := range []string{"lapi", "lcode", "lstring", "lua"} {
				cmd := command("gcc", "-std=gnu99", "-O0", "-c", c+".c", "-o", c+".o")
				cmd.Dir = src
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("gcc -c %s.c offline: %v\n%s\n%s", c, err, out, tail(m.logPath, 30))
				}
				o, err := os.ReadFile(filepath.Join(src, c+".o"))
				if err != nil || len(o) == 0 {
					t.Fatalf("read of %s.o offline: %d bytes, %v", c, len(o), err)
				}
				files["lua-5.4.8/"+c+".o"] = o
			}
		}
	}
	t.Logf("offline: %d files made in %v", len(files), time.Since(start).Round(time.Millisecond))
	for name, want := range files {
		got, err := os.ReadFile(m.path("work/" + name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("offline read of %s: %d bytes, %v; want the %d written", name, len(got), err, len(want))
		}
	}
	if v, _ := metricSum(m.metrics, "snfs_client_disconnected"); v != 1 {
		t.Fatalf("the mount came online during the test (disconnected %v)", v)
	}
	if got, _ := exportFiles(s.path("work")); len(got) != 1 {
		t.Fatalf("the export changed while the mount was offline: %d files", len(got))
	}

	if how == "kill" {
		if err := s.startErr(); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, m, "snfs_client_disconnected", 0, 30*time.Second)
	} else {
		goOnlineReq(t, m)
	}
	waitExport(t, m, s.path("work"), files, 120*time.Second)
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
	// And the mount sees what the server holds.
	for _, name := range []string{"obj/m1.o", "lua-5.4.8/lapi.c", "lua-5.4.8/lapi.o", "d0/f1.c"} {
		want, ok := files[name]
		if !ok {
			continue
		}
		if got := mustRead(t, m.path("work/"+name)); !bytes.Equal(got, want) {
			t.Fatalf("online read of %s: %d bytes; want %d", name, len(got), len(want))
		}
	}
}

// TestMountDisconnectedCreateConflict: offline, the mount makes two files;
// meanwhile a process on the server makes one of their names. Back online,
// that name keeps the server's file and the mount's goes beside it as one
// conflict copy, listed by `snfs conflicts`; the other file reaches the
// server; exactly one conflict is recorded.
func TestMountDisconnectedCreateConflict(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	mine, other, theirs := randBytes(3711, 70000), randBytes(3712, 30000), randBytes(3713, 50000)
	for name, data := range map[string][]byte{"same": mine, "other": other} {
		if err := os.WriteFile(m.path("work/"+name), data, 0o644); err != nil {
			t.Fatalf("create %s offline: %v", name, err)
		}
	}
	if err := os.WriteFile(s.path("work/same"), theirs, 0o644); err != nil {
		t.Fatal(err)
	}
	goOnlineReq(t, m)
	deadline := time.Now().Add(90 * time.Second)
	for {
		copies, _ := filepath.Glob(s.path("work/same.snfs-conflict-*"))
		var c []byte
		if len(copies) == 1 {
			c, _ = os.ReadFile(copies[0])
		}
		o, _ := os.ReadFile(s.path("work/other"))
		if len(copies) == 1 && bytes.Equal(c, mine) && bytes.Equal(o, other) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: conflict copies %v (%d bytes, want %d), other %d bytes (want %d)\n%s",
				copies, len(c), len(mine), len(o), len(other), tail(m.logPath, 60))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := mustRead(t, s.path("work/same")); !bytes.Equal(got, theirs) {
		t.Fatalf("the server's same: %d bytes; want its own %d, left alone", len(got), len(theirs))
	}
	got, err := exportFiles(s.path("work"))
	if err != nil || len(got) != 3 {
		t.Fatalf("the export's work holds %d files (%v); want same, its one conflict copy, other", len(got), err)
	}
	waitConflictListed(t, m.cacheDir, time.Now().Add(30*time.Second), "same.snfs-conflict-", "disconnected")
	if c := conflictLines(m); len(c) != 1 || !strings.Contains(c[0], "same.snfs-conflict-") || !strings.Contains(c[0], "disconnected") {
		t.Fatalf("conflicts recorded: %q; want one, of same, reason disconnected", c)
	}
	out, err := command(snfsBinary(t), "conflicts", "--cache-dir", m.cacheDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "same.snfs-conflict-") {
		t.Fatalf("snfs conflicts: %v\n%s", err, out)
	}
}

// TestMountDisconnectedKilledRemount: a mount killed while offline with a
// log of changes (and the data of the files it made, closed) leaves them in
// its cache directory; mounted again on it, it reintegrates the log and
// writes the data before it serves: the export holds everything (a
// symbolic link and a hard link of a file made offline too). A file
// of the server's that it removed offline, replaced on the server before the
// remount, is left alone, its UNLINK kept as the one conflict: the names'
// bases survive the kill.
func TestMountDisconnectedKilledRemount(t *testing.T) {
	t.Parallel()
	const seed = 3721
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("work/gone"), []byte("the server's first"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	files := map[string][]byte{}
	if err := os.Mkdir(m.path("work/k"), 0o755); err != nil {
		t.Fatalf("mkdir offline: %v", err)
	}
	for k := range 12 {
		name := fmt.Sprintf("k/f%d", k)
		data := randBytes(seed+uint64(k), 1000+k*5000)
		if err := os.WriteFile(m.path("work/"+name), data, 0o644); err != nil {
			t.Fatalf("create %s offline: %v", name, err)
		}
		files[name] = data
	}
	if err := os.Rename(m.path("work/k/f3"), m.path("work/top")); err != nil {
		t.Fatalf("rename offline: %v", err)
	}
	files["top"] = files["k/f3"]
	delete(files, "k/f3")
	if err := os.Remove(m.path("work/k/f5")); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	delete(files, "k/f5")
	if err := os.Remove(m.path("work/gone")); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	if err := os.Symlink("../top", m.path("work/k/link")); err != nil { // a CML_SYMLINK in the log
		t.Fatalf("symlink offline: %v", err)
	}
	if err := os.Link(m.path("work/k/f7"), m.path("work/k/f7.hard")); err != nil { // a CML_LINK of a file made offline
		t.Fatalf("link offline of a file made offline: %v", err)
	}
	files["k/f7.hard"] = files["k/f7"]
	m.kill9()
	if got, _ := exportFiles(s.path("work")); len(got) != 1 {
		t.Fatalf("the export changed before the remount: %d files", len(got))
	}
	replaced := randBytes(seed+100, 5000)
	if err := os.WriteFile(s.path("work/gone.new"), replaced, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.path("work/gone.new"), s.path("work/gone")); err != nil {
		t.Fatal(err)
	}
	files["gone"] = replaced
	m2 := startMount(t, s, "", m.cacheDir, "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	waitExport(t, m2, s.path("work"), files, 60*time.Second)
	if c := conflictLines(m2); len(c) != 1 || !strings.Contains(c[0], "UNLINK") {
		t.Fatalf("conflicts recorded: %q; want one, the UNLINK of gone", c)
	}
	if got := mustRead(t, m2.path("work/top")); !bytes.Equal(got, files["top"]) {
		t.Fatalf("the remounted mount reads %d bytes of top; want %d", len(got), len(files["top"]))
	}
	if got, err := os.Readlink(s.path("work/k/link")); err != nil || got != "../top" {
		t.Fatalf("the export's link made offline before the kill: %q, %v", got, err)
	}
	var a, b syscall.Stat_t
	if err := syscall.Stat(s.path("work/k/f7"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(s.path("work/k/f7.hard"), &b); err != nil || a.Ino != b.Ino || a.Nlink != 2 {
		t.Fatalf("the export's k/f7.hard: ino %d nlink %d (%v); want k/f7's inode %d with 2 links", b.Ino, a.Nlink, err, a.Ino)
	}
}

// TestMountDisconnectedNameConflict: offline, the mount removes a file the
// server made and renames a file over a name that did not exist; meanwhile
// a process on the server replaces the first (another file under the same
// name) and makes the second name. The log's records would act on the
// other's files (REMOVE and RENAME name no object): the check against what
// the names held as the mount went offline keeps both records as
// conflicts, and the server's files are left alone; the mount's renamed
// file stays under its old name. A name nobody touched (the third) is
// removed as the mount did.
func TestMountDisconnectedNameConflict(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gone", "untouched"} {
		if err := os.WriteFile(s.path("work/"+n), []byte("server's first "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	mine := randBytes(3731, 20000)
	if err := os.WriteFile(m.path("work/a"), mine, 0o644); err != nil {
		t.Fatalf("create offline: %v", err)
	}
	if err := os.Rename(m.path("work/a"), m.path("work/b")); err != nil {
		t.Fatalf("rename offline: %v", err)
	}
	for _, n := range []string{"gone", "untouched"} {
		if err := os.Remove(m.path("work/" + n)); err != nil {
			t.Fatalf("remove %s offline: %v", n, err)
		}
	}
	// Meanwhile, on the server: gone is another file now, b is made.
	replaced, theirs := randBytes(3732, 9000), randBytes(3733, 11000)
	if err := os.WriteFile(s.path("work/gone.new"), replaced, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.path("work/gone.new"), s.path("work/gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("work/b"), theirs, 0o644); err != nil {
		t.Fatal(err)
	}
	goOnlineReq(t, m)
	want := map[string][]byte{"gone": replaced, "b": theirs, "a": mine}
	waitExport(t, m, s.path("work"), want, 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for len(conflictLines(m)) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	c := conflictLines(m)
	if len(c) != 2 || !strings.Contains(strings.Join(c, "\n"), "RENAME") || !strings.Contains(strings.Join(c, "\n"), "UNLINK") {
		t.Fatalf("conflicts recorded: %q; want two: the UNLINK of gone and the RENAME to b", c)
	}
}
