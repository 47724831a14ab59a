package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMountCacheDirBusy: an snfs-mode mount whose cache directory another
// mount has open (the default one is per SERVER:/EXPORT, so the same export
// mounted on a second directory meets it) is refused with the mount that
// holds it and what to do, through the real binary. Before, the message was
// cachedir's "index.db is locked: another mount uses this cache directory:
// timeout", naming neither the other mount nor --cache-dir.
func TestMountCacheDirBusy(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	cache := cliMountDir(t, "snfs-busy-cache-")
	first, second := cliMountDir(t, "snfs-busy-1-"), cliMountDir(t, "snfs-busy-2-")
	detachAll(t, first)
	detachAll(t, second)
	mount := func(cacheDir, dir string) (string, int) {
		return runIn(t, bin, "/", "mount", "--mode=snfs", "--cache-dir", cacheDir, "--nfs-port", port, "--mount-port", port, spec, dir)
	}

	if out, code := mount(cache, first); code != 0 || withoutMountedLine(out) != "" {
		t.Fatalf("snfs mount on %s: exit %d, %q", first, code, out)
	}
	out, code := mount(cache, second)
	want := "snfs: the cache directory " + cache + " is in use by the snfs-mode mount on " + first +
		": one mount at a time uses a cache directory (by default one per SERVER:/EXPORT); unmount that one first, " +
		"or give this mount its own: --cache-dir=DIR (-o cache-dir=DIR)\n"
	if code != 1 || out != want {
		t.Fatalf("a second mount with the same cache directory: exit %d, %q; want exit 1, %q", code, out, want)
	}
	if n := mountsOn(t, second); n != 0 {
		t.Fatalf("the refused mount left %d mounts on %s", n, second)
	}
	// Its own cache directory, as the message says: both mounts at once.
	if out, code := mount(filepath.Join(cache, "second"), second); code != 0 || withoutMountedLine(out) != "" {
		t.Fatalf("snfs mount on %s with its own --cache-dir: exit %d, %q", second, code, out)
	}
	if err := os.WriteFile(filepath.Join(second, "f"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{second, first} {
		if out, code := runIn(t, bin, "/", "umount", d); code != 0 || out != "" {
			t.Fatalf("snfs umount %s: exit %d, %q", d, code, out)
		}
	}
	if b, err := os.ReadFile(e.path("f")); err != nil || string(b) != "second" {
		t.Fatalf("the export's f: %q, %v; want the second mount's write", b, err)
	}
}
