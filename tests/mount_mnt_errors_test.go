package tests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"snfs/server"
)

// TestMountRefusedExport: a MNT the server refuses says what to check,
// through the real binary, in both modes: a path it does not export
// (MNT3ERR_NOENT: the path) and an export this machine is not among the
// clients of (MNT3ERR_ACCES: the clients). Before, both were the bare status
// ("MNT /srv/typo: MNT3ERR_NOENT"). An snfs-mode mount that fails so leaves
// no cache directory behind (before, its index and data directory stayed).
func TestMountRefusedExport(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	port := fmt.Sprint(e.port())
	dir := cliMountDir(t, "snfs-mnterr-")
	detachAll(t, dir)
	cache := filepath.Join(cliMountDir(t, "snfs-mnterr-cache-"), "c")
	typo := e.dir + "-typo"
	for _, mode := range []string{"nfs", "snfs"} {
		out, code := runIn(t, bin, "/", "mount", "--mode", mode, "--cache-dir", cache, "--nfs-port", port, "--mount-port", port, "127.0.0.1:"+typo, dir)
		want := "snfs: MNT " + typo + ": MNT3ERR_NOENT: 127.0.0.1 exports no " + typo +
			": check the path (snfs serve logs each export as it starts: msg=exporting path=...)\n"
		if code != 1 || out != want {
			t.Fatalf("snfs mount --mode %s of a path not exported: exit %d, %q; want exit 1, %q", mode, code, out, want)
		}
		if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
			entries, _ := os.ReadDir(cache)
			t.Fatalf("after a refused snfs mount --mode %s, its new cache directory %s is there (%v): %v", mode, cache, err, entries)
		}
	}

	o, err := server.ParseOptions(server.DefaultOptions, "rw")
	if err != nil {
		t.Fatal(err)
	}
	// The harness mounts the first export itself; the second is for
	// 10.0.0.0/8 alone.
	open, other := diskTempDir(t, "snfs-export-"), diskTempDir(t, "snfs-export-")
	_, tenNet, _ := net.ParseCIDR("10.0.0.0/8")
	f := newEnvConfig(t, open, []server.ExportConfig{
		{Path: open, Clients: []server.ClientRule{{Spec: "*", Opts: o}}},
		{Path: other, Clients: []server.ClientRule{{Spec: "10.0.0.0/8", Net: tenNet, Opts: o}}},
	})
	fport := fmt.Sprint(f.port())
	for _, mode := range []string{"nfs", "snfs"} {
		out, code := runIn(t, bin, "/", "mount", "--mode", mode, "--cache-dir", cache, "--nfs-port", fport, "--mount-port", fport, "127.0.0.1:"+other, dir)
		want := "snfs: MNT " + other + ": MNT3ERR_ACCES: 127.0.0.1 does not export " + other + " to this machine: " +
			"check the export's clients (or secure, which wants a source port below 1024); the server logs \"refused mount request\"\n"
		if code != 1 || out != want {
			t.Fatalf("snfs mount --mode %s of an export for other clients: exit %d, %q; want exit 1, %q", mode, code, out, want)
		}
		if n := mountsOn(t, dir); n != 0 {
			t.Fatalf("a refused mount left %d mounts on %s", n, dir)
		}
	}
}
