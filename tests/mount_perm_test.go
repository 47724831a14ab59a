package tests

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/store"
)

// mountDirOf mounts e's export in mode ("nfs" or "snfs", the latter with
// delayed close on, as `snfs mount` has by default) and returns the mount
// point.
func mountDirOf(t *testing.T, e *env, mode string) string {
	t.Helper()
	if mode == "snfs" {
		return newSNFSMountDelayed(t, e, "A", time.Hour, 2*time.Second).dir
	}
	return newMount(t, e).dir
}

// runAsUser runs fn on one thread with fsuid uid, fsgid gid and no supplementary
// groups, as pjdfstest's -u and -g do: the kernel checks permissions, and
// FUSE tells the mount, with that identity.
func runAsUser(t *testing.T, uid, gid uint32, fn func() error) error {
	t.Helper()
	var ferr error
	if err := store.As(store.Cred{UID: uid, GID: gid}, func() error { ferr = fn(); return nil }); err != nil {
		t.Fatalf("switch to %d:%d: %v", uid, gid, err)
	}
	return ferr
}

func openClose(path string, flags int) error {
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// TestMountModeBits: opens that the mode bits forbid fail with EACCES for
// owner, group and others alike (also when this mount holds a delayed open of
// the file from an earlier permitted open, also with O_TRUNC, also for a
// FIFO, which the kernel opens without asking the mount), a path through a
// directory without search permission fails even while its entries are
// cached, and the creator of a file with mode 0 may still use the descriptor
// its creating open returned (pjdfstest open/06, open/07, link/06).
func TestMountModeBits(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			mnt := mountDirOf(t, e, mode)
			d := filepath.Join(mnt, "d")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(d, "f")
			if err := runAsUser(t, 65534, 65534, func() error {
				if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
					return err
				}
				// Permitted: opens for writing (in snfs mode the last one's
				// protocol open is kept for a while: delayed close).
				if err := openClose(f, os.O_WRONLY); err != nil {
					return err
				}
				return openClose(f, os.O_RDWR)
			}); err != nil {
				t.Fatal(err)
			}
			type tc struct {
				fmode    os.FileMode // set by the owner first
				uid, gid uint32
				flags    int
				want     error
			}
			cases := []tc{
				{0o477, 65534, 65534, os.O_RDONLY, nil},
				{0o477, 65534, 65534, os.O_WRONLY, syscall.EACCES},
				{0o477, 65534, 65534, os.O_RDWR, syscall.EACCES},
				{0o477, 65534, 65534, os.O_RDONLY | os.O_TRUNC, syscall.EACCES},
				{0o747, 65533, 65534, os.O_WRONLY, syscall.EACCES},
				{0o747, 65533, 65534, os.O_RDONLY | os.O_TRUNC, syscall.EACCES},
				{0o774, 65533, 65533, os.O_RDWR, syscall.EACCES},
				{0o277, 65534, 65534, os.O_RDONLY, syscall.EACCES},
				{0o277, 65534, 65534, os.O_WRONLY, nil},
				{0o707, 65533, 65534, os.O_RDONLY, syscall.EACCES},
				{0o770, 65533, 65533, os.O_RDONLY, syscall.EACCES},
				{0o060, 65533, 65534, os.O_RDWR, nil},
			}
			for _, c := range cases {
				if err := runAsUser(t, 65534, 65534, func() error { return os.Chmod(f, c.fmode) }); err != nil {
					t.Fatal(err)
				}
				err := runAsUser(t, c.uid, c.gid, func() error { return openClose(f, c.flags) })
				if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
					t.Errorf("mode %#o, uid %d gid %d, flags %#x: %v; want %v", c.fmode, c.uid, c.gid, c.flags, err, c.want)
				}
			}
			if st, err := os.Stat(f); err != nil || st.Size() != 1 {
				t.Errorf("after the refused O_TRUNC opens: %v, %v; want the file's 1 byte kept", st, err)
			}

			// A FIFO: the kernel opens it without a FUSE OPEN.
			p := filepath.Join(d, "p")
			if err := runAsUser(t, 65534, 65534, func() error { return syscall.Mkfifo(p, 0o600) }); err != nil {
				t.Fatal(err)
			}
			if err := runAsUser(t, 65533, 65533, func() error { return openClose(p, os.O_RDWR) }); !errors.Is(err, syscall.EACCES) {
				t.Errorf("FIFO 0600 of another user opened O_RDWR: %v; want EACCES", err)
			}
			if err := runAsUser(t, 65534, 65534, func() error { return openClose(p, os.O_RDWR) }); err != nil {
				t.Errorf("FIFO 0600 opened O_RDWR by its owner: %v", err)
			}

			// The creator of a file with mode 0 writes through its creating open.
			if err := runAsUser(t, 65534, 65534, func() error {
				nf, err := os.OpenFile(filepath.Join(d, "new"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0)
				if err != nil {
					return err
				}
				if _, err := nf.Write([]byte("abc")); err != nil {
					nf.Close()
					return err
				}
				return nf.Close()
			}); err != nil {
				t.Errorf("create with mode 0, then write through that descriptor: %v", err)
			}

			// Search permission: d/f is in the kernel's cache (just used);
			// d loses x for its owner.
			if err := runAsUser(t, 65534, 65534, func() error { _, err := os.Stat(f); return err }); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := runAsUser(t, 65534, 65534, func() error { _, err := os.Stat(f); return err }); !errors.Is(err, syscall.EACCES) {
				t.Errorf("stat through a directory without search permission: %v; want EACCES", err)
			}
			if err := runAsUser(t, 65534, 65534, func() error { return os.Link(f, filepath.Join(d, "g")) }); !errors.Is(err, syscall.EACCES) {
				t.Errorf("link in a directory without search permission: %v; want EACCES", err)
			}
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		})
	}
}
