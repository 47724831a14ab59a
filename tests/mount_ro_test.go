package tests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"snfs/metrics"
	"snfs/server"
)

// Read-only mounts (issue 23, item 3): `snfs mount -o ro` in both modes, made
// by the real binary. Every change fails with EROFS at the mount, nothing
// changing reaches the server, statfs says ST_RDONLY and /proc/mounts "ro";
// in snfs mode a file the mount reads is held as a reader only.

// mountOptions are the per-mount options of the mount on dir in
// /proc/self/mountinfo ("" if dir is not a mount point).
func mountOptions(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ...
		if fields := strings.Fields(sc.Text()); len(fields) > 5 && fields[4] == dir {
			opts = fields[5] // the last mount on dir wins
		}
	}
	return opts
}

// changingProcs are the procedures that change something on the server
// (NFS, and SNFS's APPEND).
var changingProcs = map[string]bool{"SETATTR": true, "WRITE": true, "CREATE": true, "MKDIR": true,
	"SYMLINK": true, "MKNOD": true, "REMOVE": true, "RMDIR": true, "RENAME": true, "LINK": true,
	"COMMIT": true, "APPEND": true}

// consistEntries is the server's census of its consistency table: files by
// state.
func consistEntries(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "snfs_server_consist_entries" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" {
					n[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return n
}

// TestMountReadOnly mounts with `snfs mount -o ro` (nfs mode) and `snfs
// mount --read-only` (snfs mode) and tries every change through the mount:
// each fails with EROFS, the export is unchanged, and the server got no
// changing call; reads work.
func TestMountReadOnly(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			reg := metrics.New()
			e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
			data := []byte("read only\n")
			if err := os.WriteFile(e.path("f"), data, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(e.path("d"), 0o777); err != nil {
				t.Fatal(err)
			}
			dir := diskTempDir(t, "snfs-ro-")
			daemonMount(t, bin, dir)
			opts := fmt.Sprintf("nfs-port=%d,mount-port=%d,mode=%s,cache-dir=%s",
				e.port(), e.port(), mode, diskTempDir(t, "snfs-cache-"))
			// -o ro in nfs mode, --read-only in snfs mode.
			args := []string{"mount", "-o", "ro," + opts}
			if mode == "snfs" {
				args = []string{"mount", "--read-only", "-o", opts}
			}
			if out, err := command(bin, append(args, "127.0.0.1:"+e.dir, dir)...).CombinedOutput(); err != nil {
				t.Fatalf("snfs %q: %v\n%s", args, err, out)
			}
			if o := mountOptions(t, dir); !strings.HasPrefix(o, "ro,") {
				t.Errorf("mountinfo options %q, want ro", o)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			if st.Flags&unix.ST_RDONLY == 0 {
				t.Errorf("statfs flags %#x: no ST_RDONLY", st.Flags)
			}
			p := func(name string) string { return filepath.Join(dir, name) }
			if got, err := os.ReadFile(p("f")); err != nil || string(got) != string(data) {
				t.Fatalf("read: %q, %v; want %q", got, err, data)
			}
			// A reader holds f open while the changes are tried (snfs mode:
			// its OPEN is a read open).
			rf, err := os.Open(p("f"))
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Close()
			if mode == "snfs" {
				n := consistEntries(t, reg)
				if n["ONE_READER"] != 1 || n["ONE_WRITER"] != 0 || n["WRITE_SHARED"] != 0 {
					t.Errorf("the server's table with f open for reading: %v; want it ONE_READER", n)
				}
			}
			for _, c := range []struct {
				what string
				do   func() error
			}{
				{"create", func() error { return os.WriteFile(p("new"), data, 0o644) }},
				{"open O_WRONLY", func() error { return openClose(p("f"), os.O_WRONLY) }},
				{"open O_RDWR", func() error { return openClose(p("f"), os.O_RDWR) }},
				{"open O_RDONLY|O_TRUNC", func() error { return openClose(p("f"), os.O_RDONLY|os.O_TRUNC) }},
				{"open O_APPEND", func() error { return openClose(p("f"), os.O_WRONLY|os.O_APPEND) }},
				{"truncate", func() error { return os.Truncate(p("f"), 0) }},
				{"chmod", func() error { return os.Chmod(p("f"), 0o600) }},
				{"chown", func() error { return os.Chown(p("f"), 1, 1) }},
				{"utimes", func() error { return unix.UtimesNano(p("f"), make([]unix.Timespec, 2)) }},
				{"unlink", func() error { return os.Remove(p("f")) }},
				{"rmdir", func() error { return os.Remove(p("d")) }},
				{"mkdir", func() error { return os.Mkdir(p("d2"), 0o755) }},
				{"rename", func() error { return os.Rename(p("f"), p("g")) }},
				{"symlink", func() error { return os.Symlink("f", p("l")) }},
				{"link", func() error { return os.Link(p("f"), p("h")) }},
				{"mkfifo", func() error { return unix.Mkfifo(p("fifo"), 0o644) }},
				{"access W_OK", func() error { return unix.Access(p("f"), unix.W_OK) }},
			} {
				if err := c.do(); !errors.Is(err, syscall.EROFS) {
					t.Errorf("%s: %v, want EROFS", c.what, err)
				}
			}
			rf.Close()
			if n := serverCalls(t, reg, "READ"); n == 0 {
				t.Error("the server counted no READ: are calls counted at all?")
			}
			for proc := range changingProcs {
				if n := serverCalls(t, reg, proc); n != 0 {
					t.Errorf("the server got %v %s calls from a read-only mount", n, proc)
				}
			}
			ents, err := os.ReadDir(e.dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, de := range ents {
				names = append(names, de.Name())
			}
			if strings.Join(names, " ") != "d f" {
				t.Errorf("the export has %q, want d f", names)
			}
			if got, err := os.ReadFile(e.path("f")); err != nil || string(got) != string(data) {
				t.Errorf("the export's f: %q, %v; want %q", got, err, data)
			}
			if out, err := command(bin, "umount", dir).CombinedOutput(); err != nil {
				t.Fatalf("snfs umount: %v\n%s", err, out)
			}
		})
	}
}
