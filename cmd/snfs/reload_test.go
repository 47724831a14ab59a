package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdReload runs the real binary as systemd would (NOTIFY_SOCKET) and
// sends it SIGHUP, as `systemctl reload` does (the unit's ExecReload): it
// sends RELOADING=1 with MONOTONIC_USEC, reloads, sends READY=1 again and
// keeps serving; SIGTERM then stops it cleanly (STOPPING=1, exit 0).
func TestSystemdReload(t *testing.T) {
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
	dir, err := os.MkdirTemp("/var/tmp", "snfs-reload-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	nfsPort, mntPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "serve", dir, "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(nfsPort),
		"--mount-port", fmt.Sprint(mntPort), "--state-dir", filepath.Join(dir, ".state"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("snfs's stderr:\n%s", stderr)
		}
	}()
	read := func(want string) string {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 512)
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		got := string(buf[:n])
		if !strings.Contains(got, want) {
			t.Fatalf("notification %q, want %s", got, want)
		}
		return got
	}
	read("READY=1")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := read("RELOADING=1"); !regexp.MustCompile(`(^|\n)MONOTONIC_USEC=[1-9][0-9]*($|\n)`).MatchString(got) {
		t.Fatalf("notification %q: RELOADING=1 without MONOTONIC_USEC", got)
	}
	read("READY=1")
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", nfsPort))
	if err != nil {
		t.Fatalf("not serving after the reload: %v", err)
	}
	c.Close()
	// The server notifies READY=1 before it logs the reload's report
	// (serve.go), and its stderr reaches the buffer through exec's copying
	// goroutine: the line may come after the notification, so wait for it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), `msg="exports reloaded"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	read("STOPPING=1")
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after SIGTERM")
	}
}
