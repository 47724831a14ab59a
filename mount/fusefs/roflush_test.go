package fusefs_test

import (
	"os"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestReadOnlyCloseNotHeldByWriteBack: the close of a read-only descriptor
// returns while the file's data written through another descriptor cannot
// reach the server. It waited for that write-back: a forked child's
// close-on-exec of an inherited read-only descriptor then held up the child's
// exec, and every descriptor it had copied, until the server answered again.
func TestReadOnlyCloseNotHeldByWriteBack(t *testing.T) {
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			m := newTestMount(t, mode, vfs.Config{})
			path := m.dir + "/f"
			w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.Write([]byte("first")); err != nil {
				t.Fatal(err)
			}
			r, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			m.proxy.Partition(0)
			defer m.proxy.Heal()
			if _, err := w.Write(make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			// A writer's close while partitioned waits for the server; the
			// reader's must not.
			closed := make(chan error, 1)
			go func() { closed <- r.Close() }() // ends when the close returns (at the latest once healed)
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("read-only close: %v", err)
				}
			case <-time.After(10 * time.Second):
				m.proxy.Heal()
				<-closed
				t.Fatal("the close of a read-only descriptor waited for the write-back of another descriptor's data")
			}
			m.proxy.Heal()
			if err := w.Close(); err != nil {
				t.Fatalf("writer's close after the heal: %v", err)
			}
			if b, err := os.ReadFile(m.export + "/f"); err != nil || len(b) != 5+64<<10 || string(b[:5]) != "first" {
				t.Fatalf("the server has %d bytes (%v), want %d", len(b), err, 5+64<<10)
			}
		})
	}
}
