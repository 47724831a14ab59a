package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdReadiness runs the real binary as systemd would (NOTIFY_SOCKET): it
// sends READY=1 only once its ports accept connections, and STOPPING=1 on SIGTERM.
func TestSystemdReadiness(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sock := filepath.Join(tmp, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dir, err := os.MkdirTemp("/var/tmp", "snfs-notify-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	nfsPort, mntPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "serve", dir, "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(nfsPort),
		"--mount-port", fmt.Sprint(mntPort), "--state-dir", filepath.Join(dir, ".state"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	read := func() string {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 512)
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	if msg := read(); !strings.Contains(msg, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", msg)
	}
	for _, p := range []int{nfsPort, mntPort} {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("READY=1 sent before port %d accepts: %v", p, err)
		}
		c.Close()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if msg := read(); !strings.Contains(msg, "STOPPING=1") {
		t.Fatalf("notification on SIGTERM %q, want STOPPING=1", msg)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
