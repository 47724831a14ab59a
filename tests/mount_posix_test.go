package tests

import (
	"os"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// knownMountFailures are posixtest cases `snfs mount --mode=nfs` fails, with
// the reason; each is skipped with that reason (and listed in docs/mount.md).
var knownMountFailures = map[string]string{
	"Fallocate": "NFSv3 has no ALLOCATE: fallocate answers EOPNOTSUPP, as Linux's NFSv3 client does " +
		"(emulating it by extending the size would promise space that is not reserved; snfs mode has it)",
	"FallocateKeepSize": "NFSv3 has no ALLOCATE: fallocate answers EOPNOTSUPP, as Linux's NFSv3 client does",
	"FcntlFlockLocksFile": "expects a conflict between two POSIX locks of one process on two descriptors, " +
		"which POSIX record locks do not give: it fails on a local ext4 directory too (go-fuse's loopback " +
		"passes only because it turns them into OFD locks); this mount keeps locks local, as nolock does",
	"OpenSymlinkRace": "flaky (about 1 run in 3): an open racing a rename over its name in a tight loop reaches " +
		"the server after the old file is gone (NFS3ERR_STALE); the kernel retries the lookup once on " +
		"ESTALE and the loop can win again; Linux's NFSv3 client has the same window",
}

// knownSNFSFailure is knownMountFailures for a mount in snfs mode, which has
// fallocate (SNFS ALLOCATE).
func knownSNFSFailure(name string) (string, bool) {
	if name == "Fallocate" || name == "FallocateKeepSize" {
		return "", false
	}
	why, ok := knownMountFailures[name]
	return why, ok
}

// TestMountPosix runs go-fuse's POSIX suite against a mount of `snfs serve`,
// each case in a fresh export and mount.
func TestMountPosix(t *testing.T) {
	// Serial (no t.Parallel): posixtest's FdLeak counts the process's open descriptors.
	runPosix(t, func(t *testing.T, e *env) string { return newMount(t, e).dir }, func(name string) (string, bool) {
		why, ok := knownMountFailures[name]
		return why, ok
	})
}

// runPosix runs every posixtest case, each in a fresh export (newEnv) and on a
// fresh mount of it made by mount, which returns its directory; a case known
// says fails is skipped with the reason; SNFS_POSIX=Name runs that case only.
// Its callers are serial: posixtest's FdLeak counts the process's open
// descriptors.
func runPosix(t *testing.T, mount func(*testing.T, *env) string, known func(name string) (string, bool)) {
	requireFUSE(t)
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := known(name); ok {
				t.Skip("known failure: " + why)
			}
			if only := os.Getenv("SNFS_POSIX"); only != "" && only != name {
				t.Skip("SNFS_POSIX selects another case")
			}
			e := newEnv(t, "rw,no_root_squash")
			posixtest.All[name](t, mount(t, e))
		})
	}
}
