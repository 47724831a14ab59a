package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/server"
)

// Errors found at write-back surface (issue 14: "Errors found at write-back
// (ENOSPC, EDQUOT, EIO) surface on the next fsync or close of that file and
// in the log; nothing is dropped silently"), with a real ENOSPC: the export
// is a small ext4 image, loop-mounted, and the test writes more than fits.
//
// EIO is tested with an injected flush failure (mount_eio_test.go: no
// device-mapper here for a dm-error device). Not tested: EDQUOT. This
// machine's kernel cannot enforce a quota on ext4: mounting an image made
// with `mkfs.ext4 -O quota` fails with "The kernel was not built with
// CONFIG_QUOTA and CONFIG_QFMT_V2" (it has no QFMT_V2). EDQUOT takes the
// same path as ENOSPC and EIO: any NFS error status of a WRITE or COMMIT.

// smallExportSize is the ext4 image's size; wbErrFileSize, more than that,
// is what the tests write.
const (
	smallExportSize = 32 << 20
	wbErrFileSize   = 64 << 20
)

// newSmallEnv serves a fresh ext4 file system of smallExportSize bytes
// (on a loop device, no blocks reserved for root), removed when the test
// ends (after the server stops).
func newSmallEnv(t *testing.T) *env {
	t.Helper()
	requireRoot(t)
	for _, p := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(p); err != nil {
			requireInCI(t, p+" not installed (util-linux, e2fsprogs)")
		}
	}
	work := diskTempDir(t, "snfs-small-")
	img, dir := filepath.Join(work, "export.img"), filepath.Join(work, "export")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, smallExportSize); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := run("losetup", "-f", "--show", img)
	t.Cleanup(func() {
		if out, err := command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	run("mount", dev, dir)
	t.Cleanup(func() {
		// Busy: say who holds it (seen twice in CI under load, not
		// explained yet), and try again for a while before failing.
		var holders string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, err := command("umount", dir).CombinedOutput()
			if err == nil {
				if holders != "" {
					t.Logf("umount %s: busy at first, held by: %s", dir, holders)
				}
				return
			}
			if holders == "" {
				holders = pathHolders(dir)
			}
			if time.Now().After(deadline) {
				t.Errorf("umount %s: %v\n%s\nheld by: %s", dir, err, out, pathHolders(dir))
				command("umount", "-l", dir).Run()
				return
			}
		}
	})
	os.Chmod(dir, 0o777)
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		t.Fatal(err)
	}
	return newEnvConfig(t, dir, []server.ExportConfig{{Path: dir, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}})
}

// writeMore writes wbErrFileSize bytes to a new file p and closes it; it
// returns the first error (of a write or of the close).
func writeMore(t *testing.T, p string) error {
	t.Helper()
	_, err := writeFile(t, p, wbErrFileSize)
	return err
}

// writeFile writes size bytes to a new file p in 1 MiB writes and closes it;
// it returns the error of the first write that failed (nil if none did) and
// the first error of all.
func writeFile(t *testing.T, p string, size int) (writeErr, first error) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	chunk := randBytes(1, 1<<20)
	for off := 0; off < size && first == nil; off += len(chunk) {
		_, first = f.Write(chunk)
	}
	writeErr = first
	if err := f.Close(); first == nil {
		first = err
	}
	return writeErr, first
}

// fillBut fills the file system of dir, directly (not through NFS), until
// only free bytes are left (within a block group's metadata): with fallocate,
// which takes the blocks at once. Filling by writing until ENOSPC left more
// free once its data was synced when the disk was busy (ext4 refuses delayed
// allocations early while its reservations for them are high), and a 4 MiB
// file then fit in "2 MiB".
func fillBut(t *testing.T, dir string, free int64) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	avail := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	size := int64(0)
	for range 100 {
		more := avail() - free
		if more < 64<<10 {
			break
		}
		// The extent tree takes blocks too: ENOSPC for the last bytes.
		for more >= 64<<10 {
			if err := unix.Fallocate(int(f.Fd()), 0, size, more); err == nil {
				size += more
				break
			} else if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fallocate: %v", err)
			}
			more /= 2
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if a := avail(); a > free+(1<<20) {
		t.Fatalf("%d bytes free after filling, want about %d", a, free)
	}
}

// reopenFsync opens p for writing, fsyncs and closes it; it returns the
// fsync's error and the close's.
func reopenFsync(t *testing.T, p string) (fsyncErr, closeErr error) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fsyncErr = f.Sync()
	return fsyncErr, f.Close()
}

// waitLog waits (up to a minute) for the mount's log to contain all of want.
func waitLog(t *testing.T, m *procMount, want ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		log := m.log.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(log, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's log has no %q; the log:\n%s", missing, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMountSNFSWriteBackENOSPC: snfs mode, write-back delay of an hour. The
// file is written and closed without an error (the data is only in the
// client's cache directory; the server does not have it); the fsync after
// reopening writes it back, the server runs out of space, and the fsync
// returns ENOSPC; the log says so.
func TestMountSNFSWriteBackENOSPC(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newSmallEnv(t)
	serverFiles(t, e, "big")
	m := startProcMount(t, snfsBinary(t), "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()),
		"--mode=snfs", "--writeback-delay=1h", "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)
	if err := writeMore(t, m.path("big")); err != nil {
		t.Fatalf("write and close with an hour's write-back delay: %v (want no error: the data is cached)", err)
	}
	if n := exportHas(t, e.path("big")); n != 0 {
		t.Fatalf("the server has %d bytes of the file before write-back", n)
	}
	fsyncErr, closeErr := reopenFsync(t, m.path("big"))
	if !errors.Is(fsyncErr, syscall.ENOSPC) {
		t.Fatalf("fsync: %v, want ENOSPC (close: %v); the mount's log:\n%s", fsyncErr, closeErr, m.log.String())
	}
	t.Logf("fsync: %v; the close after it: %v", fsyncErr, closeErr)
	waitLog(t, m, "write-back failed", "NFS3ERR_NOSPC")
}

// TestMountSNFSDelayedWriteBackENOSPC: the same with a short write-back
// delay: the delayed write-back fails, nobody is told yet; the next close of
// the file (a reopen) returns ENOSPC. If the delayed write-back already ran
// while the file was being written, the first close returns it.
func TestMountSNFSDelayedWriteBackENOSPC(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newSmallEnv(t)
	serverFiles(t, e, "big")
	m := startProcMount(t, snfsBinary(t), "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()),
		"--mode=snfs", "--writeback-delay=1s", "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)
	err := writeMore(t, m.path("big"))
	if err == nil {
		waitLog(t, m, "write-back failed", "NFS3ERR_NOSPC")
		f, oerr := os.OpenFile(m.path("big"), os.O_RDONLY, 0)
		if oerr != nil {
			t.Fatal(oerr)
		}
		err = f.Close()
	} else {
		t.Logf("the delayed write-back ran while the file was written: %v", err)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close after a failed delayed write-back: %v, want ENOSPC; the mount's log:\n%s", err, m.log.String())
	}
	waitLog(t, m, "write-back failed", "NFS3ERR_NOSPC")
}

// TestMountNFSWriteENOSPC: nfs mode writes through, buffered up to the dirty
// limit (8 MiB) and flushed on close. 4 MiB written with 2 MiB free: every
// write returns (the data is buffered), the close flushes and returns
// ENOSPC. 64 MiB on the empty export: a write (a flush at the dirty limit)
// or, at the latest, the close returns ENOSPC.
func TestMountNFSWriteENOSPC(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	t.Run("close", func(t *testing.T) {
		e := newSmallEnv(t)
		m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()), "--mode=nfs")...)
		fillBut(t, e.dir, 2<<20)
		writeErr, err := writeFile(t, m.path("f"), 4<<20)
		if writeErr != nil {
			t.Fatalf("a write of data below the dirty limit: %v (want it buffered)", writeErr)
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("close of 4 MiB written with 2 MiB free: %v, want ENOSPC; the server's file: %s", err, serverFile(e.path("f")))
		}
	})
	t.Run("write", func(t *testing.T) {
		e := newSmallEnv(t)
		m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()), "--mode=nfs")...)
		writeErr, err := writeFile(t, m.path("big"), wbErrFileSize)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write and close of %d bytes on a %d-byte export: %v, want ENOSPC", wbErrFileSize, smallExportSize, err)
		}
		t.Logf("first error: %v (from a write: %v)", err, writeErr != nil)
	})
}

// TestMountWriteENOSPCForkedClose: the CI failure of
// TestMountNFSWriteENOSPC/close ("close of 4 MiB written with 2 MiB free:
// <nil>"). A process forked while the file is open (then, any exec.Command of
// a test running in parallel) holds a copy of the descriptor until its exec
// closes it (O_CLOEXEC), and the kernel sends FLUSH for that close too: that
// flush writes the data back, the server runs out of space, and the ENOSPC
// goes to the exec, which ignores it. The application's own close must still
// return it: the error is kept per file (as Linux's errseq), not handed to
// whichever flush comes first. (The tests' children are no longer forked
// from this process, spawner_test.go: other processes' copies of the file
// are made on purpose, closeCopies.)
func TestMountWriteENOSPCForkedClose(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	t.Run("nfs", func(t *testing.T) {
		e := newSmallEnv(t)
		m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()), "--mode=nfs")...)
		fillBut(t, e.dir, 2<<20)
		f, err := os.OpenFile(m.path("f"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		chunk := randBytes(1, 1<<20)
		for range 4 {
			if _, err := f.Write(chunk); err != nil {
				t.Fatalf("a write of data below the dirty limit: %v (want it buffered)", err)
			}
		}
		closeCopies(t, f)
		if err := f.Close(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("close of 4 MiB written with 2 MiB free, after a forked child closed its copy: %v, want ENOSPC; the server's file: %s",
				err, serverFile(e.path("f")))
		}
	})
	t.Run("snfs", func(t *testing.T) {
		e := newSmallEnv(t)
		serverFiles(t, e, "f")
		m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()),
			"--mode=snfs", "--writeback-delay=1s", "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)
		fillBut(t, e.dir, 2<<20)
		writeErr, err := writeFile(t, m.path("f"), 4<<20)
		if err != nil {
			t.Fatalf("write and close with a delayed write-back: %v (write: %v), want no error: the data is cached", err, writeErr)
		}
		waitLog(t, m, "write-back failed", "NFS3ERR_NOSPC")
		f, err := os.OpenFile(m.path("f"), os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		closeCopies(t, f)
		if err := f.Close(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("close after a failed delayed write-back, after a forked child closed its copy: %v, want ENOSPC", err)
		}
	})
}

// closeCopies has other processes close copies of f, each close a FLUSH
// before f's own, as a child forked while f is open closes its copy at its
// exec: the spawner closes the one it is sent once the child has started,
// the child (given it as fd 3) at its exit.
func closeCopies(t *testing.T, f *os.File) {
	t.Helper()
	cmd := command("true")
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("true: %v\n%s", err, out)
	}
}

// serverFile describes the export's file p: its size and how many of its
// bytes are those writeFile writes.
func serverFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	chunk, same := randBytes(1, 1<<20), 0
	for k := range b {
		if b[k] == chunk[k%len(chunk)] {
			same++
		}
	}
	return fmt.Sprintf("%d bytes, %d of them as written", len(b), same)
}

// pathHolders lists the processes with a descriptor, working directory or
// mapping under dir (from /proc): what keeps a file system busy.
func pathHolders(dir string) string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		var what []string
		links, _ := filepath.Glob(p + "/fd/*")
		links = append(links, p+"/cwd", p+"/root")
		for _, l := range links {
			if target, err := os.Readlink(l); err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
				what = append(what, filepath.Base(l)+"="+target)
			}
		}
		if maps, err := os.ReadFile(p + "/maps"); err == nil && strings.Contains(string(maps), dir+"/") {
			what = append(what, "maps")
		}
		if len(what) > 0 {
			comm, _ := os.ReadFile(p + "/comm")
			out = append(out, fmt.Sprintf("%s (%s): %s", filepath.Base(p), strings.TrimSpace(string(comm)), strings.Join(what, " ")))
		}
	}
	if len(out) == 0 {
		return "no process (a kernel reference: a loop device, a mount under it, fanotify)"
	}
	return strings.Join(out, "; ")
}
