package tests

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"snfs/server"
)

// TestUmountStaleRoot: a mount whose export the server removed (exports
// reload: its root handle is stale) is still unmounted by snfs umount, and a
// new mount on it is refused as on any mount point in use, through the real
// binary, in both modes. Before, once the mount's cached attributes of its
// root expired (about 30 s), both failed with "lstat DIR: stale file handle":
// the mount could only be removed with umount(8).
func TestUmountStaleRoot(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		t.Fatal(err)
	}
	// The harness mounts the first export itself; the second goes away.
	keep, gone := diskTempDir(t, "snfs-export-"), diskTempDir(t, "snfs-export-")
	all := []server.ExportConfig{
		{Path: keep, Clients: []server.ClientRule{{Spec: "*", Opts: o}}},
		{Path: gone, Clients: []server.ClientRule{{Spec: "*", Opts: o}}},
	}
	e := newEnvConfig(t, keep, all)
	port := fmt.Sprint(e.port())
	modes := []string{"nfs", "snfs"}
	dirs := map[string]string{}
	args := map[string][]string{}
	for _, mode := range modes {
		dirs[mode] = cliMountDir(t, "snfs-stale-")
		detachAll(t, dirs[mode])
		args[mode] = []string{"mount", "--mode", mode, "--cache-dir", cliMountDir(t, "snfs-stale-cache-"),
			"--nfs-port", port, "--mount-port", port, "127.0.0.1:" + gone, dirs[mode]}
		if out, code := runIn(t, bin, "/", args[mode]...); code != 0 || withoutMountedLine(out) != "" {
			t.Fatalf("%s mode: snfs mount: exit %d, %q", mode, code, out)
		}
	}
	if _, err := e.srv.Reload(all[:1]); err != nil {
		t.Fatal(err)
	}
	// Until the mounts' roots are stale to lstat too, as a user meets them
	// a while after the removal (once the cached attributes expire).
	for _, mode := range modes {
		for i := 0; ; i++ {
			_, err := os.ReadDir(dirs[mode])
			if _, serr := os.Stat(dirs[mode]); errors.Is(err, syscall.ESTALE) && errors.Is(serr, syscall.ESTALE) {
				break
			}
			if i == 1200 {
				t.Fatalf("%s mode: the mount of a removed export still answers after 120 s: %v", mode, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, mode := range modes {
		dir := dirs[mode]
		out, code := runIn(t, bin, "/", args[mode]...)
		want := fmt.Sprintf("snfs: %s is already a mount point (fuse.snfs 127.0.0.1:%s): unmount it first (snfs umount %s), "+
			"or pass --allow-non-empty (-o nonempty) to mount over it\n", dir, gone, dir)
		if code != 1 || out != want {
			t.Fatalf("%s mode: snfs mount on a mount whose export was removed: exit %d, %q; want exit 1, %q", mode, code, out, want)
		}
		if out, code := runIn(t, bin, "/", "umount", dir); code != 0 || out != "" {
			t.Fatalf("%s mode: snfs umount of a mount whose export was removed: exit %d, %q; want exit 0, no output", mode, code, out)
		}
		if n := mountsOn(t, dir); n != 0 {
			t.Fatalf("%s mode: %d mounts left on %s", mode, n, dir)
		}
	}
}
