//go:build !race

// pjdfstest takes minutes per mode without the race detector and far longer
// under it; scripts/test.sh runs it in its own non-race step.

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// knownPjdfstestFailures are the pjdfstest subtests ("dir/NN.t:N") a mount
// fails, in either mode, with the reason (docs/mount.md, "POSIX").
var knownPjdfstestFailures = map[string]string{
	// NFSv3's nfstime3 has 32 unsigned bits of seconds: 2^32 (year 2106),
	// which the test sets as an mtime, cannot be sent (RFC 1813 section
	// 2.6); the kernel NFSv3 client cannot either.
	"utimensat/09.t:5": "NFSv3 times end in 2106 (uint32 seconds)",
}

// pjdfstestDir finds ../shared/tools/pjdfstest beside the repository
// (SNFS_PJDFSTEST overrides).
func pjdfstestDir(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("SNFS_PJDFSTEST")}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; d != "/"; d = filepath.Dir(d) {
			cands = append(cands, filepath.Join(d, "shared/tools/pjdfstest"))
		}
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(c, "build.sh")); err == nil {
			return c
		}
	}
	requireInCI(t, "../shared/tools/pjdfstest/build.sh not found (set SNFS_PJDFSTEST)")
	return ""
}

// buildPjdfstest builds pjdfstest into a temporary directory and returns its
// tests directory.
func buildPjdfstest(t *testing.T) string {
	t.Helper()
	tool := pjdfstestDir(t)
	for _, bin := range []string{"gcc", "make", "autoreconf", "prove"} {
		if _, err := exec.LookPath(bin); err != nil {
			requireInCI(t, "pjdfstest needs "+bin+" (gcc, make, autoconf, automake, perl)")
		}
	}
	dir := diskTempDir(t, "snfs-pjdfstest-")
	if out, err := command("bash", filepath.Join(tool, "build.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("building pjdfstest: %v\n%s", err, out)
	}
	return filepath.Join(dir, "pjdfstest", "tests")
}

// TestMountPjdfstest runs pjdfstest (as root) in a mount of each mode and
// fails on every failed subtest not in knownPjdfstestFailures.
func TestMountPjdfstest(t *testing.T) {
	t.Parallel()
	requireLong(t)
	requireFUSE(t)
	tests := buildPjdfstest(t)
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // one mount and one export each
			e := newEnv(t, "rw,no_root_squash")
			var mnt string
			if mode == "snfs" {
				// `snfs mount`'s defaults: 30 s write-back delay, 2 s close delay.
				mnt = newSNFSMountDelayed(t, e, "A", 30*time.Second, 2*time.Second).dir
			} else {
				mnt = newMount(t, e).dir
			}
			work := filepath.Join(mnt, "pjd")
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// Test files are independent (each makes its own names), and
			// their time is round trips: four at a time.
			// The shell changes into the mount, not exec's child before
			// it execs: that child is a vfork of this process, which
			// serves the mount, and its lookup of work (snfs mode gives
			// the kernel no name to keep) would wait for this process
			// while a stop of the world here waits for the vfork.
			cmd := command("sh", "-c", `cd "$1" && exec prove -r -j4 "$2"`, "sh", work, tests)
			out, err := cmd.CombinedOutput()
			failed, total, perr := parseProve(string(out))
			if perr != nil {
				t.Fatalf("prove (%v): %v\n%s", err, perr, out)
			}
			t.Logf("%s mode: %d subtests, %d failed, in %v", mode, total, len(failed), time.Since(start).Round(time.Second))
			var unexpected []string
			for _, f := range failed {
				if why, ok := knownPjdfstestFailures[f]; ok {
					t.Logf("known failure %s: %s", f, why)
					continue
				}
				unexpected = append(unexpected, f)
			}
			if len(unexpected) > 0 {
				t.Errorf("%d failed subtests not known to fail: %s\n%s", len(unexpected), strings.Join(unexpected, " "), out)
			}
			if total < 8000 {
				t.Errorf("prove ran %d subtests; pjdfstest has about 8,800", total)
			}
		})
	}
}
