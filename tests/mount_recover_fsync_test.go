package tests

import (
	"bytes"
	"os"
	"testing"
)

// TestMountSNFSRecoverAfterFsync: a small file (its dirty data committed
// inline in the cache index at close) is patched and fsynced, which writes
// it back to the server, and the mount is killed with SIGKILL at once. The
// remount must not write the close's older bytes back over what the fsync
// put on the server: the fsync's write-back reaches the index before fsync
// returns. Without that, the restarted mount restored the data file from
// the index's inline copy (the close's) and "completed" the write-back
// with it: the file kept its length and lost the patch (the soak's
// same-length, different-bytes reads; docs/mount.md "Recovery").
func TestMountSNFSRecoverAfterFsync(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	serverProcFiles(t, s, "small")
	for round := range 3 {
		a := startMount(t, s, "", "")
		first := randBytes(uint64(90+round), 12000)
		writeDurable(t, a.path("small"), first) // closed: dirty, an hour's write-back delay
		patch := randBytes(uint64(95+round), 3000)
		f, err := os.OpenFile(a.path("small"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(patch, 9000); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		a.kill9() // the descriptor dies with the mount
		f.Close()
		want := append(append([]byte{}, first[:9000]...), patch...)
		if got := mustRead(t, s.path("small")); !bytes.Equal(got, want) {
			t.Fatalf("round %d: before the remount the export has %s", round, firstDiff(got, want, 0))
		}
		b := startMount(t, s, a.dir, a.cacheDir)
		if got := mustRead(t, s.path("small")); !bytes.Equal(got, want) {
			t.Fatalf("round %d: after the remount the export has %s", round, firstDiff(got, want, 0))
		}
		if got := mustRead(t, b.path("small")); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the remount reads %s", round, firstDiff(got, want, 0))
		}
		b.umount()
	}
}
