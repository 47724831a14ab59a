package tests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedTar: offline, GNU tar extracts the Lua tarball into
// a directory the mount has listed. tar restores each file's and
// directory's mode, owner (the mount's own: root's tarball, root's tar) and
// times after writing it: those SETATTRs of objects made offline are made
// locally and logged. Offline the mount shows the modes and times tar set;
// back online the export holds the tree a local extraction makes: the same
// names, bytes, modes and mtimes (the data written to the server after the
// log's records, its times set again after it).
func TestMountDisconnectedTar(t *testing.T) {
	t.Parallel()
	tb := luaTarball()
	if tb == "" {
		t.Skip("no Lua tarball in this checkout (../shared/data/lua-5.4.8.tar.gz; SNFS_LUA_TARBALL)")
	}
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar here")
	}
	local := diskTempDir(t, "snfs-tar-local")
	if out, err := command(tarBin, "-xzf", tb, "-C", local).CombinedOutput(); err != nil {
		t.Fatalf("local extraction: %v\n%s", err, out)
	}
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	if out, err := command(tarBin, "-xzf", tb, "-C", m.path("work")).CombinedOutput(); err != nil {
		t.Fatalf("tar x offline: %v\n%s\n%s", err, out, tail(m.logPath, 40))
	}
	if d := treeMeta(t, local, m.path("work")); d != "" {
		t.Fatalf("offline, the mount's tree differs from a local extraction:\n%s", d)
	}
	if v, _ := metricSum(m.metrics, "snfs_client_disconnected"); v != 1 {
		t.Fatalf("the mount came online during the test (disconnected %v)", v)
	}
	goOnlineReq(t, m)
	deadline := time.Now().Add(120 * time.Second)
	for {
		d := treeMeta(t, local, s.path("work"))
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the export's tree differs from a local extraction:\n%s\n%s", d, tail(m.logPath, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
}

// treeMeta compares the tree under got with the one under want: names,
// types, permission bits, mtimes, owners and regular files' bytes; "" when
// they agree, else the first differences.
func treeMeta(t *testing.T, want, got string) string {
	t.Helper()
	return treeMetaOf(t, want, got, true)
}

// treeMetaOf is treeMeta, directories' mtimes compared only with dirTimes
// (a directory changed after its utimes gets the time the server applied
// the change).
func treeMetaOf(t *testing.T, want, got string, dirTimes bool) string {
	t.Helper()
	var diffs []string
	seen := map[string]bool{}
	err := filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		if rel == "." {
			return nil
		}
		seen[rel] = true
		wi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		gi, err := os.Lstat(filepath.Join(got, rel))
		if err != nil {
			diffs = append(diffs, rel+": "+err.Error())
			return nil
		}
		if wi.Mode() != gi.Mode() {
			diffs = append(diffs, rel+": mode "+gi.Mode().String()+", want "+wi.Mode().String())
		}
		if (dirTimes || !wi.IsDir()) && !wi.ModTime().Equal(gi.ModTime()) {
			diffs = append(diffs, rel+": mtime "+gi.ModTime().String()+", want "+wi.ModTime().String())
		}
		ws, gs := wi.Sys().(*syscall.Stat_t), gi.Sys().(*syscall.Stat_t)
		if ws.Uid != gs.Uid || ws.Gid != gs.Gid {
			diffs = append(diffs, fmt.Sprintf("%s: owner %d:%d, want %d:%d", rel, gs.Uid, gs.Gid, ws.Uid, ws.Gid))
		}
		if wi.Mode().IsRegular() {
			wb, _ := os.ReadFile(p)
			gb, err := os.ReadFile(filepath.Join(got, rel))
			if err != nil || !bytes.Equal(wb, gb) {
				diffs = append(diffs, rel+": bytes differ")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(got, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if rel, _ := filepath.Rel(got, p); rel != "." && !seen[rel] {
			diffs = append(diffs, rel+": not in the local extraction")
		}
		return nil
	})
	if len(diffs) > 8 {
		diffs = append(diffs[:8], "...")
	}
	return strings.Join(diffs, "\n")
}
