package tests

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"

	"golang.org/x/sys/unix"
)

// TestMountSNFSPermitsPassthroughAfterResolve: a file made locally under a
// write-back permit, its data kept locally (--permit-data=on) or not, is
// made on the server while its creator's open is still open (a lock
// resolves it) and written through that open; a second open of it through
// the same kernel inode then succeeds and reads the creator's bytes. The creator's open is one whose
// pages the kernel caches, and Linux refuses a passthrough open beside it
// (EIO), so the mount must not pass the second one through while it lasts
// (cachemgr's localOpensOfNode); once it is released, later opens do.
func TestMountSNFSPermitsPassthroughAfterResolve(t *testing.T) {
	t.Parallel()
	for _, data := range []bool{true, false} {
		t.Run(map[bool]string{true: "permit-data", false: "no-permit-data"}[data], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "rw,no_root_squash")
			a := newSNFSMountWith(t, e, "A", "", snfsmount.Config{WriteBackDelay: time.Hour, Permits: true, PermitData: data},
				fusefs.Options{Passthrough: true})
			requirePassthrough(t, a)
			want := randBytes(5, 10000)
			f1, err := os.Create(a.path("f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f1.Close()
			if err := setlk(f1, unix.F_WRLCK, 0, 0); err != nil {
				t.Fatalf("lock of the file made locally: %v", err)
			}
			if _, err := f1.Write(want); err != nil {
				t.Fatal(err)
			}
			f2, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
			if err != nil {
				t.Fatalf("a second open while the creator's is open: %v", err)
			}
			got, err := io.ReadAll(f2)
			f2.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the second open reads %d bytes (%v), want the creator's %d", len(got), err, len(want))
			}
			if err := setlk(f1, unix.F_UNLCK, 0, 0); err != nil {
				t.Fatal(err)
			}
			f1.Close()
			// Released (the kernel sends RELEASE after close returns): a
			// later read open of the file, now cached whole, passes through.
			deadline := time.Now().Add(10 * time.Second)
			for {
				before := cachemgr.StatsOf(a.v).PassthroughOpens.Load()
				got, err := os.ReadFile(a.path("f"))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("a read open after the close reads %d bytes (%v), want %d", len(got), err, len(want))
				}
				if cachemgr.StatsOf(a.v).PassthroughOpens.Load() > before {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no open of the file passed through after its creator's was released")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
