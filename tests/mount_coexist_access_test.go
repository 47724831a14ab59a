package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMountNFSReadsAfterSNFSWrite: an nfs-mode mount (a plain NFSv3 client)
// opens a file right after an snfs-mode mount wrote and closed it, its data
// still only in that mount's cache (write-back delay 1 h). The nfs mount's
// open revalidates with ACCESS, whose post-op attributes it takes as the
// file's: ACCESS of a regular file waits for the dirty client's write-back as
// GETATTR does, or the plain client sees the old size and reads nothing
// (close-to-open broken between the two kinds of client).
func TestMountNFSReadsAfterSNFSWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMountDelayed(t, e, "A", time.Hour, 0)
	b := newMount(t, e)
	for k := range 10 {
		name := fmt.Sprintf("f%d", k)
		if k%2 == 0 {
			// b knows the file (its size, its times) before a rewrites it;
			// the odd ones are new to b.
			if err := os.WriteFile(filepath.Join(b.dir, name), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(b.dir, name)); err != nil || string(got) != "old" {
				t.Fatalf("%s through b: %q, %v", name, got, err)
			}
		}
		want := bytes.Repeat([]byte(fmt.Sprintf("line %d of the new version\n", k)), 100+k*37)
		if err := os.WriteFile(a.path(name), want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s through the nfs mount after the snfs mount's close: %d bytes, want %d", name, len(got), len(want))
		}
	}
}
