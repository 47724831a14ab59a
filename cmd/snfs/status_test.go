package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"snfs/mount"
	"snfs/mount/cachemgr"
)

// TestPrintStatus: snfs status's lines for an snfs-mode mount connected
// with dirty data and more conflicts than it lists, one disconnected and
// recovering with permits and a log in use, and an nfs-mode mount, whose
// snfs-only figures are n/a.
func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	lt := func(d time.Duration) string { return now.Add(-d).Local().Format(time.DateTime) }
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name string
		st   mount.Status
		want string
	}{{
		name: "snfs connected",
		st: mount.Status{Time: now, MountPoint: "/mnt/a", Mode: mount.SNFS, Server: "127.0.0.1:2049", Export: "/srv/a",
			Connection: mount.StatusConnection{Connected: true, Since: now.Add(-90 * time.Second)},
			Dirty:      mount.StatusDirty{Bytes: 5000, Files: 2, OldestSeconds: f(12.4)},
			SNFS: &mount.StatusSNFS{CacheDir: "/var/cache/snfs/a", KeptOpens: 3,
				Conflicts: mount.StatusConflicts{Count: 3, Newest: []cachemgr.Conflict{
					{Time: now.Add(-time.Hour), Name: "b", Conflict: "b.snfs-conflict-h-1", Reason: "restart"},
					{Time: now.Add(-2 * time.Hour), Name: "a", Conflict: "a.snfs-conflict-h-2", Reason: "fenced"}}}}},
		want: `mount:                  /mnt/a (snfs mode)
server:                 127.0.0.1:2049, export /srv/a
connection:             connected since ` + lt(90*time.Second) + ` (1m30s ago)
server restarts:        0 seen
not yet on the server:  4.9 KiB (5000 bytes) in 2 files, the oldest written 12s ago
kept opens:             3 files (reopened with no call until the server recalls them)
write-back permits:     none held (not in use: this mount makes its directory changes through the server)
modification log:       empty (not in use: this mount logs no changes)
conflicts:              3; the newest 2 below, all with snfs conflicts /mnt/a
                        ` + lt(time.Hour) + `  b saved as b.snfs-conflict-h-1 (restart)
                        ` + lt(2*time.Hour) + `  a saved as a.snfs-conflict-h-2 (fenced)
cache directory:        /var/cache/snfs/a
`,
	}, {
		name: "snfs disconnected",
		st: mount.Status{Time: now, MountPoint: "/mnt/b", Mode: mount.SNFS, Server: "127.0.0.1:2049", Export: "/srv/b",
			Connection: mount.StatusConnection{Since: now.Add(-500 * time.Millisecond), Reason: "connection to 127.0.0.1:2049 closed",
				Recovering: true, ServerRestarts: 1},
			Dirty: mount.StatusDirty{OldestSeconds: f(0)},
			SNFS: &mount.StatusSNFS{CacheDir: "/c",
				Permits: mount.StatusPermits{InUse: true, Held: 1, Dirs: []cachemgr.PermitHeld{{Dir: "src", Permit: 7, Since: now.Add(-time.Minute)}}},
				Log:     mount.StatusLog{InUse: true, Records: 3, Bytes: 300, OldestSeconds: 2, Planned: 1}}},
		want: `mount:                  /mnt/b (snfs mode)
server:                 127.0.0.1:2049, export /srv/b
connection:             DISCONNECTED since ` + lt(500*time.Millisecond) + ` (500ms ago): connection to 127.0.0.1:2049 closed
server restarts:        1 seen; recovering from the last (reclaim, reintegration) now
not yet on the server:  nothing
kept opens:             0 files (reopened with no call until the server recalls them)
write-back permits:     1 held
                        src (permit 7, since ` + lt(time.Minute) + ` (1m0s ago))
modification log:       3 records, 300 bytes, the oldest 2s old, 1 being reintegrated
conflicts:              none
cache directory:        /c
`,
	}, {
		name: "nfs",
		st: mount.Status{Time: now, MountPoint: "/mnt/c", Mode: mount.NFS, Server: "10.0.0.1:2049", Export: "/srv/c",
			Connection: mount.StatusConnection{Connected: true, Since: now.Add(-time.Second)},
			Dirty:      mount.StatusDirty{Bytes: 1, Files: 1}},
		want: `mount:                  /mnt/c (nfs mode)
server:                 10.0.0.1:2049, export /srv/c
connection:             connected since ` + lt(time.Second) + ` (1s ago)
server restarts:        n/a (nfs mode)
not yet on the server:  1 byte in 1 file (oldest: n/a (nfs mode))
kept opens:             n/a (nfs mode)
write-back permits:     n/a (nfs mode)
modification log:       n/a (nfs mode)
conflicts:              n/a (nfs mode)
`,
	}}
	for _, c := range cases {
		var b bytes.Buffer
		if err := printStatus(&b, &c.st); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.name, b.String(), c.want)
		}
		// What the mount serves, snfs status --json passes on: it decodes
		// to the same status, with n/a as null.
		j, err := json.Marshal(c.st)
		if err != nil {
			t.Fatal(err)
		}
		var back mount.Status
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatal(err)
		}
		var b2 bytes.Buffer
		printStatus(&b2, &back)
		if b2.String() != c.want {
			t.Errorf("%s after a JSON round trip:\n%s", c.name, b2.String())
		}
		if c.st.Mode == mount.NFS && !strings.Contains(string(j), `"snfs":null`) || !strings.Contains(string(j), `"oldest_seconds":`) {
			t.Errorf("%s: JSON %s", c.name, j)
		}
	}
}

// TestSizeOf: byte counts for a person.
func TestSizeOf(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1: "1 byte", 1023: "1023 bytes", 1024: "1.0 KiB (1024 bytes)",
		3 << 20: "3.0 MiB (3145728 bytes)", 5 << 40: "5.0 TiB (5497558138880 bytes)", 5 << 50: "5120.0 TiB (5629499534213120 bytes)"} {
		if got := sizeOf(n); got != want {
			t.Errorf("sizeOf(%d) = %q, want %q", n, got, want)
		}
	}
}
