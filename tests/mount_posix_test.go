package tests

import (
	"os"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// knownMountFailures are posixtest cases `snfs mount --mode=nfs` fails, with
// the reason; each is skipped with that reason (and listed in docs/mount.md).
var knownMountFailures = map[string]string{}

// TestMountPosix runs go-fuse's POSIX suite against a mount of `snfs serve`,
// each case in a fresh export and mount.
func TestMountPosix(t *testing.T) {
	requireFUSE(t)
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := knownMountFailures[name]; ok {
				t.Skip("known failure: " + why)
			}
			if only := os.Getenv("SNFS_POSIX"); only != "" && only != name {
				t.Skip("SNFS_POSIX selects another case")
			}
			e := newEnv(t, "rw,no_root_squash")
			m := newMount(t, e)
			posixtest.All[name](t, m.dir)
		})
	}
}
