package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"

	"golang.org/x/sys/unix"
)

// Lost locks whatever the kernel's I/O path (docs/mount.md, "Lost locks"):
// reads the kernel serves from its pages and the reads and writes it makes
// to a passthrough cache file never reach the mount, yet once a lock is lost
// the descriptor through which it was taken fails them with EIO, while
// descriptors without locks go on; an unlock of the whole file ends it.

// lostLockMount mounts e's export in snfs mode through addr (a fault proxy,
// or e.addr), with FUSE passthrough as pt says.
func lostLockMount(t *testing.T, e *env, name, addr string, pt bool) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, "", snfsmount.Config{Addr: addr, WriteBackDelay: time.Hour, Logger: failLogger(t, "mount "+name)},
		fusefs.Options{Passthrough: pt})
}

// lostLockSetup: A (through a fault proxy, passthrough as pt says) writes
// db, opens it (O_RDWR with write) and locks all of it through fa; a flock
// child of mount B opens db for reading (the file stays cached by A unless
// A writes it) and, once A is partitioned, waits for an exclusive flock,
// which the server grants when A's probe has gone unanswered past the
// callback timeout. The partition then heals. It returns fa and db's bytes.
func lostLockSetup(t *testing.T, pt, write bool, before func(a *snfsMount)) (*snfsMount, *os.File, []byte) {
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.Table.CallbackTimeout = 2 * time.Second
	e.restart()
	// db made on the server first: A's write makes it a file cached whole
	// in A's cache directory, which passes through. A file A creates
	// under a write-back permit (the default) keeps its data in A's local
	// store until reintegrated, read and written through the mount.
	if err := os.WriteFile(e.path("db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, e.addr)
	a := lostLockMount(t, e, "A", p.Addr(), pt)
	b := lostLockMount(t, e, "B", e.addr, pt)
	want := randBytes(24, 3*4096+100)
	if err := os.WriteFile(a.path("db"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	flags, typ := os.O_RDONLY, int16(unix.F_RDLCK)
	if write {
		flags, typ = os.O_RDWR, unix.F_WRLCK
	}
	opens := cachemgr.StatsOf(a.v).PassthroughOpens.Load()
	fa, err := os.OpenFile(a.path("db"), flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fa.Close() })
	if n := cachemgr.StatsOf(a.v).PassthroughOpens.Load() - opens; pt != (n == 1) {
		t.Fatalf("A's open passed through %d times, want passthrough %v", n, pt)
	}
	if before != nil {
		before(a)
	}
	if err := setlk(fa, typ, 0, 0); err != nil {
		t.Fatalf("A locks: %v", err)
	}
	// After the grant (which drops the kernel's pages): read into the
	// kernel's pages, or through the passthrough file.
	got := make([]byte, len(want))
	if _, err := fa.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("A reads under its lock: %v", err)
	}
	if n := residentPages(t, fa, len(want)); !pt && n != (len(want)+4095)/4096 {
		t.Fatalf("%d of db's pages in the kernel's cache after A's read, want all", n)
	}
	c := startLockChild(t, b.path("db"), gatedChild("TestMountSNFSLostLockFlockChild"))
	c.expect(t, "ready")
	p.Partition(0)
	t.Logf("%s: partitioned", time.Now().Format(time.TimeOnly+".000"))
	t.Cleanup(p.Heal) // on a failure: before the closes and unmounts (last first)
	c.go_()
	c.expect(t, "waiting")
	c.expect(t, "locked") // A's lock was revoked
	p.Heal()
	t.Logf("%s: B locked; healed", time.Now().Format(time.TimeOnly+".000"))
	return a, fa, want
}

// residentPages counts f's pages in the kernel's page cache (mincore of a
// mapping: mapping the file reads nothing).
func residentPages(t *testing.T, f *os.File, size int) int {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// awaitLost reads through fa until its read fails with EIO: the mount learns
// of the loss at its next lease renewal (within a callback timeout of the
// partition's end), whatever I/O the process does meanwhile.
func awaitLost(t *testing.T, fa *os.File) {
	t.Helper()
	buf := make([]byte, 100)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := fa.ReadAt(buf, 0)
		if errors.Is(err, unix.EIO) {
			return
		}
		if err != nil {
			t.Fatalf("A's read after its lock was revoked: %v, want EIO", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("A still reads through the descriptor whose lock was revoked 10 s after the partition ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readByChild reads path in another process (a descriptor without locks).
func readByChild(t *testing.T, path string) []byte {
	t.Helper()
	out, err := command("cat", path).Output()
	if err != nil {
		t.Fatalf("another process reads %s: %v", path, err)
	}
	return out
}

// TestMountSNFSLockLostPageCache: A's lock was taken through a descriptor
// the kernel serves from its pages; after the loss that descriptor's read
// fails with EIO though the pages were cached, another descriptor of the
// file (no locks) reads, and the unlock of the whole file ends the loss.
func TestMountSNFSLockLostPageCache(t *testing.T) {
	t.Parallel()
	var ga *os.File
	a, fa, want := lostLockSetup(t, false, false, func(a *snfsMount) {
		var err error
		if ga, err = os.Open(a.path("db")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ga.Close() })
	})
	awaitLost(t, fa)
	got := make([]byte, len(want))
	if _, err := ga.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("A's other descriptor (no locks) reads after the loss: %v", err)
	}
	if got := readByChild(t, a.path("db")); !bytes.Equal(got, want) {
		t.Fatal("another process reads other bytes after the loss")
	}
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatalf("A unlocks: %v", err)
	}
	if _, err := fa.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("A reads after unlocking: %v", err)
	}
}

// TestMountSNFSLockLostPassthrough: A's lock was taken through a
// passthrough descriptor (a read open; a write open, pinned once B opens the
// file): after the loss its reads and writes fail with EIO, though the
// kernel makes them to the cache file itself; another process reads the
// file; the unlock of the whole file ends the loss.
func TestMountSNFSLockLostPassthrough(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, write := range []bool{false, true} {
		t.Run(fmt.Sprintf("write=%v", write), func(t *testing.T) {
			a, fa, want := lostLockSetup(t, true, write, nil)
			awaitLost(t, fa)
			if write {
				_, err := fa.WriteAt([]byte("unprotected"), 0)
				wantEIO(t, "A's passthrough write after its lock was revoked", err)
			}
			if got := readByChild(t, a.path("db")); !bytes.Equal(got, want) {
				t.Fatal("another process reads other bytes after the loss")
			}
			_, err := fa.ReadAt(make([]byte, 10), 0)
			wantEIO(t, "A's passthrough read after another process's", err)
			if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
				t.Fatalf("A unlocks: %v", err)
			}
			got := make([]byte, len(want))
			if _, err := fa.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("A reads after unlocking: %v", err)
			}
			if write {
				if _, err := fa.WriteAt([]byte("A again"), 0); err != nil {
					t.Fatalf("A writes after unlocking: %v", err)
				}
			}
		})
	}
}

// TestMountSNFSLostLockFlockChild is the gated flock child's body: it opens
// its file for reading and takes an exclusive flock when told.
func TestMountSNFSLostLockFlockChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv("SNFS_LOCK_CHILD")
	if path == "" {
		t.Skip("the flock child of TestMountSNFSLockLost*")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fmt.Println("waiting")
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	select {}
}
