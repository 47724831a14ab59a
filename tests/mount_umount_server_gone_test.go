package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUmountServerGone: snfs umount of an nfs-mode mount with nothing left
// to write, whose server is gone, returns within seconds, through the real
// binary: the mount process's closing UMNT is bounded (5 s, as snfs mode's).
// Before, the UMNT was retried for the whole write-back bound (5 minutes),
// and snfs umount waited for it until its own --timeout.
func TestUmountServerGone(t *testing.T) {
	// Serial (no t.Parallel): it bounds a duration.
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	port := fmt.Sprint(e.port())
	dir := cliMountDir(t, "snfs-gone-")
	detachAll(t, dir)
	if out, code := runIn(t, bin, "/", "mount", "--nfs-port", port, "--mount-port", port, "127.0.0.1:"+e.dir, dir); code != 0 || withoutMountedLine(out) != "" {
		t.Fatalf("snfs mount: exit %d, %q", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("flushed at close"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.stop()
	start := time.Now()
	out, code := runIn(t, bin, "/", "umount", "--timeout", "30s", dir)
	if code != 0 || out != "" {
		t.Fatalf("snfs umount with the server gone: exit %d, %q after %v; want exit 0, no output", code, out, time.Since(start))
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("snfs umount with the server gone took %v", d)
	}
	if n := mountsOn(t, dir); n != 0 {
		t.Fatalf("%d mounts left on %s", n, dir)
	}
}
