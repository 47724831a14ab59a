package fusefs_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"snfs/mount/vfs"
)

// TestFUSEDescriptorNotInherited: a program run by a process that serves a
// mount does not hold the mount's /dev/fuse descriptor. It did (go-fuse's
// mount(2) path opens it without close-on-exec): a child then kept the
// connection alive after the mount's process died, and a child waiting on
// the mount waited for good (cloexec.go).
func TestFUSEDescriptorNotInherited(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the mount(2) path is root's")
	}
	newTestMount(t, "nfs", vfs.Config{})
	out, err := exec.Command("sh", "-c", `for f in /proc/$$/fd/*; do echo "$f -> $(readlink "$f")"; done`).CombinedOutput()
	if err != nil {
		t.Fatalf("listing the child's descriptors: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Fatalf("a child of the mount's process holds /dev/fuse:\n%s", out)
	}
}
