package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// testRemoveOpenLinks removes names of files that are open, through mount
// point mnt of export directory export:
//   - one of two hard links of a file open for writing: the other name keeps
//     the file and reports one link, during the open and after it, and the
//     data written through the open reaches the server (in snfs mode, where
//     it is cached: at write-back, which the removal must not cancel);
//   - the only name of an open file: the open still reads it (the mount hid
//     it under another name), and at its close nothing is left in the
//     directory.
func testRemoveOpenLinks(t *testing.T, mnt, export string) {
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	if err := os.WriteFile(a, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(b, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("written through the other link while one was removed")
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(b, &st); err != nil || st.Nlink != 1 {
		t.Fatalf("stat of the other link while open: nlink %d, %v; want 1", st.Nlink, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(b, &st); err != nil || st.Nlink != 1 {
		t.Fatalf("stat of the other link after the close: nlink %d, %v; want 1", st.Nlink, err)
	}
	// fsync through a new open: in snfs mode the data is written back then.
	if h, err := os.OpenFile(b, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else if err := h.Sync(); err != nil {
		t.Fatal(err)
	} else {
		h.Close()
	}
	if got := mustRead(t, filepath.Join(export, "b")); !bytes.Equal(got, want) {
		t.Fatalf("the export's file has %q, want %q", got, want)
	}

	c := filepath.Join(mnt, "c")
	if err := os.WriteFile(c, []byte("only name"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := g.ReadAt(buf, 0); string(buf[:n]) != "only name" {
		t.Fatalf("reading a removed open file: %q %v", buf[:n], err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// The hidden name goes at the last release, which the kernel sends
	// after close returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, err := os.ReadDir(export)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 1 && ents[0].Name() == "b" {
			break
		}
		if time.Now().After(deadline) {
			names := []string{}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("the export holds %v after the last close; want only b", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMountRemoveOpenLinks(t *testing.T) {
	t.Parallel()
	inBothModes(t, testRemoveOpenLinks)
}

// inBothModes runs test against a fresh export mounted in nfs mode and, in
// parallel, in snfs mode (an hour's write-back delay).
func inBothModes(t *testing.T, test func(t *testing.T, mnt, export string)) {
	t.Run("nfs", func(t *testing.T) {
		t.Parallel() // each its own server and mount
		e := newEnv(t, "rw,no_root_squash")
		test(t, newMount(t, e).dir, e.dir)
	})
	t.Run("snfs", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "rw,no_root_squash")
		test(t, newSNFSMount(t, e, "A", "", time.Hour).dir, e.dir)
	})
}

// TestMountRmdirAfterUnlinkOpen: a directory whose file was removed while
// open can be removed as soon as the file is closed, although the kernel's
// RELEASE (which removes the hidden name) comes after close(2) has returned
// (pjdfstest unlink/14.t failed for this in CI).
func TestMountRmdirAfterUnlinkOpen(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mnt, export string) {
		for n := 0; n < 40; n++ {
			d := filepath.Join(mnt, fmt.Sprintf("d%d", n))
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(d, "f")
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("Hello, World!"), 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 13)
			if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "Hello, World!" {
				t.Fatalf("read after unlink: %q, %v", buf, err)
			}
			f.Close()
			if err := os.Remove(d); err != nil {
				t.Fatalf("round %d: rmdir right after the last close: %v", n, err)
			}
		}
		noHidden(t, export)
	})
}
