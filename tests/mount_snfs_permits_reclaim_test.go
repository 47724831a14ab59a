package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"snfs/nfs3"
)

// TestMountSNFSPermitsServerRestartReclaim (docs/protocol.md section 21.9):
// two `snfs mount --permits=on` processes; mount2 renames, creates and
// removes names of a directory locally under its permit, and the server is
// killed with SIGKILL before that log is in, and started again. mount1
// lists the directory at once: it must see every name mount2's
// application was told exists and none it removed. Without the permits'
// reclaim, the restarted server held no permit: it served mount1's read
// from the directory as the crash left it (mount2's log went in only
// later; its removals of files even waited for the grace period's end).
func TestMountSNFSPermitsServerRestartReclaim(t *testing.T) {
	t.Parallel()
	permitRestartReclaim(t, func(s *srvProc, m1 *mntProc) []string {
		ents, err := os.ReadDir(m1.path("d"))
		if err != nil {
			t.Fatalf("mount1's listing after the restart: %v", err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		return got
	})
}

// TestMountSNFSPermitsServerRestartReclaimPlain is
// TestMountSNFSPermitsServerRestartReclaim with a plain NFSv3 client (the
// Go client, no consistency protocol) reading the directory right after
// the restart: its LOOKUP and READDIR are answered NFS3ERR_JUKEBOX until
// mount2 has reclaimed, and then see mount2's names.
func TestMountSNFSPermitsServerRestartReclaimPlain(t *testing.T) {
	t.Parallel()
	permitRestartReclaim(t, func(s *srvProc, _ *mntProc) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		nc, lk := nfsLookupExport(ctx, t, s, "d")
		defer nc.Close()
		var got []string
		var cookie uint64
		var verf [nfs3.CookieVerfSize]byte
		for eof := false; !eof; {
			var res *nfs3.ReaddirRes
			nfsRetry(t, "READDIR", func() (nfs3.Status, error) {
				var err error
				res, err = nc.Readdir(ctx, &nfs3.ReaddirArgs{Dir: lk.Object, Cookie: cookie, CookieVerf: verf, Count: 32 << 10})
				if err != nil {
					return 0, err
				}
				return res.Status, nil
			})
			for _, e := range res.Entries {
				if e.Name != "." && e.Name != ".." {
					got = append(got, e.Name)
				}
				cookie = e.Cookie
			}
			verf, eof = res.CookieVerf, res.EOF
		}
		return got
	})
}

// permitRestartReclaim is the two tests' body: read lists d through the
// reader right after the server's restart.
func permitRestartReclaim(t *testing.T, read func(s *srvProc, m1 *mntProc) []string) {
	requireFUSE(t)
	s := newServeProc(t, "--grace", "10s", "--log-level", "debug")
	const n = 20
	if err := os.MkdirAll(s.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if err := os.WriteFile(s.path(fmt.Sprintf("d/f%02d", k)), []byte(fmt.Sprint(k)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m1 := startMount(t, s, "", "", "--permits=on", "--log-level", "debug")
	m2 := startMount(t, s, "", "", "--permits=on", "--log-level", "debug")
	if ents, err := os.ReadDir(m1.path("d")); err != nil || len(ents) != n {
		t.Fatalf("mount1's listing before: %d entries, %v", len(ents), err)
	}
	if ents, err := os.ReadDir(m2.path("d")); err != nil || len(ents) != n {
		t.Fatalf("mount2's listing before: %d entries, %v", len(ents), err)
	}
	// mount2's changes, made locally under d's permit (the log goes in
	// after 5 s, or on a recall): renames, removes, empty files made.
	want := map[string]bool{}
	for k := range n {
		want[fmt.Sprintf("f%02d", k)] = true
	}
	for k := range 6 {
		from, to := fmt.Sprintf("f%02d", k), fmt.Sprintf("g%02d", k)
		if err := os.Rename(m2.path("d/"+from), m2.path("d/"+to)); err != nil {
			t.Fatal(err)
		}
		delete(want, from)
		want[to] = true
	}
	for k := 6; k < 10; k++ {
		name := fmt.Sprintf("f%02d", k)
		if err := os.Remove(m2.path("d/" + name)); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	for k := range 4 {
		name := fmt.Sprintf("new%d", k)
		f, err := os.OpenFile(m2.path("d/"+name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	if _, err := os.Lstat(s.path("d/g00")); err == nil {
		t.Fatal("d/g00 is on the server before the kill: mount2's rename was not made locally under a permit")
	}
	killed := time.Now()
	s.restart()
	// At once: the read waits (the grace period holds it until mount2 has
	// reclaimed, then the permit's recall until mount2's log is in).
	got := read(s, m1)
	t.Logf("the directory read %v after the kill", time.Since(killed).Round(time.Millisecond))
	var missing, extra []string
	for name := range want {
		if !slices.Contains(got, name) {
			missing = append(missing, name)
		}
	}
	for _, name := range got {
		if !want[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("the listing right after the server's restart: MISSING %q (mount2's application was told they exist), EXTRA %q (mount2 removed or renamed them away)", missing, extra)
	}
	// Each name mount2 renamed holds its file.
	for k := range 6 {
		b, err := os.ReadFile(m1.path(fmt.Sprintf("d/g%02d", k)))
		if err != nil || string(b) != fmt.Sprint(k) {
			t.Errorf("d/g%02d through mount1: %q, %v; want %q", k, b, err, fmt.Sprint(k))
		}
	}
	// And the server's directory is so (the read recalled the permit: the
	// log is in).
	for name := range want {
		if _, err := os.Lstat(s.path("d/" + name)); err != nil {
			t.Errorf("d/%s on the server after the read: %v", name, err)
		}
	}
	// The way it went: mount2 reclaimed d's permit in the grace period.
	if log, _ := os.ReadFile(s.logPath); !strings.Contains(string(log), "permits_reclaimed=1") {
		t.Errorf("the restarted server's log has no grace period that reclaimed d's permit (permits_reclaimed=1)")
	}
	if c, _ := os.ReadFile(m2.cacheDir + "/conflicts"); len(c) > 0 {
		t.Errorf("mount2 kept conflicts; want none (nobody else changed d):\n%s", c)
	}
}
