package fusefs

import (
	"syscall"
	"testing"
)

// TestMountMinor: the minor number the mount table gives for a mount point
// is the one stat(2) gives (here for /proc, which asks no FUSE daemon), and
// mountinfo's octal escapes are undone.
func TestMountMinor(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc", &st); err != nil {
		t.Fatal(err)
	}
	m, ok := mountMinor("/proc")
	if want := (st.Dev & 0xff) | ((st.Dev >> 12) & 0xfff00); !ok || m != want {
		t.Fatalf("mountMinor(/proc) = %d, %v; want %d", m, ok, want)
	}
	if _, ok := mountMinor("/no/such/mount/point"); ok {
		t.Fatal("a directory mounted on nothing has a minor number")
	}
	if got := unescapeMountinfo(`/var/tmp/a\040b\134c`); got != `/var/tmp/a b\c` {
		t.Fatalf("unescape: %q", got)
	}
}
