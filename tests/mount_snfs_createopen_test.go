package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/cachemgr"
	"snfs/server"
)

// TestMountSNFSCreateOpen: `cp -r` of a tree into an snfs mount creates
// each file with one call, CREATE_OPEN (docs/protocol.md 4.21): no CREATE,
// no OPEN. Against a server without CREATE_OPEN (PROC_UNAVAIL) the mount
// falls back to CREATE and OPEN per file. Either way the server has the
// tree once the mount has written back.
func TestMountSNFSCreateOpen(t *testing.T) {
	t.Parallel()
	for _, without := range []bool{false, true} {
		name := "CREATE_OPEN"
		if without {
			name = "without CREATE_OPEN"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "rw,no_root_squash")
			reg := metrics.New()
			e.restartWith(func(c *server.Config) { c.Metrics, c.Observer, c.NoCreateOpen = reg, reg, without })
			m := newSNFSMount(t, e, "A", "", time.Hour)
			src := diskTempDir(t, "snfs-src-")
			const dirs, per = 2, 12
			for d := range dirs {
				for f := range per {
					p := filepath.Join(src, "tree", fmt.Sprint("d", d), fmt.Sprint("f", f))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := serverCallsByProc(t, reg)
			if out, err := command("cp", "-r", filepath.Join(src, "tree"), m.path("tree")).CombinedOutput(); err != nil {
				t.Fatalf("cp -r: %v: %s", err, out)
			}
			after := serverCallsByProc(t, reg)
			calls := func(proc string) float64 { return after[proc] - before[proc] }
			files := float64(dirs * per)
			want := map[string]float64{"CREATE_OPEN": files, "CREATE": 0, "OPEN": 0}
			if without {
				want = map[string]float64{"CREATE_OPEN": 0, "CREATE": files, "OPEN": files}
			}
			for proc, n := range want {
				if calls(proc) != n {
					t.Errorf("%s calls for %v files: %v; want %v", proc, files, calls(proc), n)
				}
			}
			if n := cachemgr.StatsOf(m.v).CreateOpened.Load(); !without && n != uint64(files) {
				t.Errorf("creates opened by their CREATE_OPEN: %d; want %v", n, files)
			}
			m.unmount(t)
			for d := range dirs {
				for f := range per {
					rel := filepath.Join("tree", fmt.Sprint("d", d), fmt.Sprint("f", f))
					got, err := os.ReadFile(e.path(rel))
					if want := filepath.Join(src, rel); err != nil || !bytes.Equal(got, []byte(want)) {
						t.Fatalf("the server's %s: %q, %v; want %q", rel, got, err, want)
					}
				}
			}
		})
	}
}
