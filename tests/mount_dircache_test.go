package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/vfs"
	"snfs/server"
)

// names lists dir through the mount (names only: no stat of dir itself, so
// the kernel learns nothing new about dir's attributes).
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func wantNames(t *testing.T, what, dir string, want ...string) {
	t.Helper()
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("%s: %s lists %q; want %q", what, dir, got, want)
	}
}

// TestMountDirListingCache: a directory listed again while its attributes
// are fresh is listed from the kernel's cache (no READDIRPLUS), by the same
// user; another user's open still asks the server (which refuses a user
// without permission); this client's own changes, a silly-renamed file
// removed at its release and, once the attributes expired, another client's
// change, are all seen by the next listing and the ones after it.
func TestMountDirListingCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	for _, n := range []string{"d/a", "d/b"} {
		os.MkdirAll(filepath.Dir(e.path(n)), 0o755)
		if err := os.WriteFile(e.path(n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(e.path("closed"), 0o700)
	os.WriteFile(e.path("closed/x"), nil, 0o600)
	// Long directory attribute timeouts: the second listing comes well
	// within them however slow the machine.
	m := newMountConfig(t, e, vfs.Config{AcDirMin: time.Hour, AcDirMax: time.Hour})
	d := filepath.Join(m.dir, "d")

	wantNames(t, "first listing", d, "a", "b")
	rp := serverCalls(t, reg, "READDIRPLUS")
	wantNames(t, "second listing", d, "a", "b")
	wantNames(t, "third listing", d, "a", "b")
	if n := serverCalls(t, reg, "READDIRPLUS") - rp; n != 0 {
		t.Errorf("listings of an unchanged directory with fresh attributes sent %v READDIRPLUS; want 0", n)
	}

	// Own changes through the kernel.
	if err := os.WriteFile(filepath.Join(d, "c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNames(t, "after a create", d, "a", "b", "c")
	wantNames(t, "again after a create", d, "a", "b", "c")
	if err := os.Remove(filepath.Join(d, "a")); err != nil {
		t.Fatal(err)
	}
	wantNames(t, "after an unlink", d, "b", "c")
	wantNames(t, "again after an unlink", d, "b", "c")
	wantNames(t, "once more after an unlink", d, "b", "c")

	// The daemon's own changes: an unlinked open file is renamed away, and
	// removed at its (asynchronous) release.
	f, err := os.Open(filepath.Join(d, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d, "b")); err != nil {
		t.Fatal(err)
	}
	names(t, d)
	names(t, d)
	f.Close()
	deadline := time.Now().Add(20 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if slices.Equal(names(t, d), []string{"c"}) {
			break
		}
	}
	wantNames(t, "after the release of an unlinked open file", d, "c")
	wantNames(t, "again after the release of an unlinked open file", d, "c")

	// A user without permission is refused although root's listing of a
	// 0700 directory is cached; one with permission lists it.
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	closed := filepath.Join(m.dir, "closed")
	wantNames(t, "root", closed, "x")
	wantNames(t, "root again", closed, "x")
	out, err := command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", closed).CombinedOutput()
	if err == nil {
		t.Errorf("nobody listed a 0700 root directory that root's listing is cached of: %q", out)
	}
	out, err = command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", d).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "c" {
		t.Errorf("nobody listing a 0755 directory: %q %v", out, err)
	}
}

// TestMountDirListingForeign: another client's change to a directory whose
// listing the kernel caches is seen by every listing once the directory's
// attributes have expired.
func TestMountDirListingForeign(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	os.Mkdir(e.path("d"), 0o755)
	os.WriteFile(e.path("d/a"), nil, 0o644)
	// The attributes expire only by the mount's clock, which the test moves
	// forward past the timeout instead of waiting it out.
	const ac = time.Hour
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	m := newMountConfig(t, e, vfs.Config{AcDirMin: ac, AcDirMax: ac, Clock: clock})
	d := filepath.Join(m.dir, "d")
	wantNames(t, "first listing", d, "a")
	wantNames(t, "second listing", d, "a")
	// Another client (here the export itself) adds and removes names.
	os.WriteFile(e.path("d/b"), nil, 0o644)
	ahead.Add(int64(3 * ac))
	wantNames(t, "after another client's create", d, "a", "b")
	wantNames(t, "again after another client's create", d, "a", "b")
	wantNames(t, "once more after another client's create", d, "a", "b")
	os.Remove(e.path("d/a"))
	ahead.Add(int64(3 * ac))
	wantNames(t, "after another client's unlink", d, "b")
	wantNames(t, "again after another client's unlink", d, "b")
	wantNames(t, "once more after another client's unlink", d, "b")
}
