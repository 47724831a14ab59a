package tests

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func libnfsURL(e *env, path string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s?version=3&nfsport=%d&mountport=%d", path, e.port(), e.port())
}

func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (Debian libnfs-utils; .ci/run installs it)", name)
	}
	return p
}

// TestLibnfsCopy: nfs-cp a 100 MiB random file in and out; SHA-256 must match.
func TestLibnfsCopy(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cp := requireTool(t, "nfs-cp")
	e := newEnv(t, "rw,no_root_squash")
	src := filepath.Join(diskTempDir(t, "snfs-src-"), "random")
	data := make([]byte, 100<<20)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if out, err := command(cp, src, libnfsURL(e, e.dir+"/random")).CombinedOutput(); err != nil {
		t.Fatalf("nfs-cp in: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(e.path("random"))
	if sha256.Sum256(got) != want {
		t.Fatal("file copied in differs")
	}
	back := src + ".back"
	if out, err := command(cp, libnfsURL(e, e.dir+"/random"), back).CombinedOutput(); err != nil {
		t.Fatalf("nfs-cp out: %v\n%s", err, out)
	}
	got, _ = os.ReadFile(back)
	if sha256.Sum256(got) != want {
		t.Fatal("file copied out differs")
	}
}

// TestLibnfsList: nfs-ls a directory of 10,000 files; each name once.
func TestLibnfsList(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ls := requireTool(t, "nfs-ls")
	e := newEnv(t, "rw,no_root_squash")
	os.Mkdir(e.path("d"), 0o755)
	for i := 0; i < 10000; i++ {
		os.WriteFile(e.path(fmt.Sprintf("d/f%05d", i)), nil, 0o644)
	}
	out, err := command(ls, libnfsURL(e, e.dir+"/d")).CombinedOutput()
	if err != nil {
		t.Fatalf("nfs-ls: %v\n%s", err, out)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		seen[f[len(f)-1]]++
	}
	for i := 0; i < 10000; i++ {
		if n := seen[fmt.Sprintf("f%05d", i)]; n != 1 {
			t.Fatalf("f%05d listed %d times", i, n)
		}
	}
}

// guestRunner finds ../shared/tools/linux-nfs-client/run.sh beside the repository.
func guestRunner(t *testing.T) string {
	t.Helper()
	requireLong(t)
	if runtime.GOOS != "linux" {
		t.Skip("the Linux guest runs on Linux only")
	}
	cands := []string{os.Getenv("SNFS_LINUX_CLIENT")}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; d != "/"; d = filepath.Dir(d) {
			cands = append(cands, filepath.Join(d, "shared/tools/linux-nfs-client/run.sh"))
		}
	}
	for _, c := range cands {
		if c != "" {
			if _, err := os.Stat(c); err == nil {
				return guestWrapper(t, c)
			}
		}
	}
	t.Skip("../shared/tools/linux-nfs-client/run.sh not found (set SNFS_LINUX_CLIENT)")
	return ""
}

//go:embed guest/uml-xstate.c
var umlXstateSrc []byte

var guestWrap struct {
	once sync.Once
	dir  string
	path string
	err  string
}

// guestWrapper returns a script that runs run with the guest kernel's ptrace
// calls going through guest/uml-xstate.c (LD_PRELOAD; built once per test
// binary): without it, User-Mode-Linux panics at boot on hosts with AMX
// (the shim's comment says why). Elsewhere it changes nothing.
func guestWrapper(t *testing.T, run string) string {
	t.Helper()
	guestWrap.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			guestWrap.err = "no C compiler (cc) to build guest/uml-xstate.c (.ci/run installs gcc)"
			return
		}
		dir, err := os.MkdirTemp("", "snfs-guest-")
		if err != nil {
			guestWrap.err = err.Error()
			return
		}
		guestWrap.dir = dir
		src, so, sh := filepath.Join(dir, "uml-xstate.c"), filepath.Join(dir, "uml-xstate.so"), filepath.Join(dir, "run.sh")
		if err := os.WriteFile(src, umlXstateSrc, 0o644); err != nil {
			guestWrap.err = err.Error()
			return
		}
		if out, err := command(cc, "-O2", "-shared", "-fPIC", "-o", so, src, "-ldl").CombinedOutput(); err != nil {
			guestWrap.err = "building guest/uml-xstate.c: " + err.Error() + "\n" + string(out)
			return
		}
		script := fmt.Sprintf("#!/bin/sh\nLD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD} exec %s \"$@\"\n", so, run)
		if err := os.WriteFile(sh, []byte(script), 0o755); err != nil {
			guestWrap.err = err.Error()
			return
		}
		guestWrap.path = sh
	})
	if guestWrap.err != "" {
		t.Fatal(guestWrap.err)
	}
	return guestWrap.path
}

// runGuest runs a script from tests/guest in the Linux guest against e.
func runGuest(t *testing.T, e *env, script string) string {
	t.Helper()
	run := guestRunner(t)
	abs, _ := filepath.Abs(filepath.Join("guest", script))
	cmd := command(run, "--host-root", "--mem", "512M", "--timeout", "300",
		"--port", fmt.Sprint(e.port()), "--mountport", fmt.Sprint(e.port()), "--export", e.dir, abs)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("script status: 0")) || !bytes.Contains(out, []byte("all checks passed")) {
		t.Fatalf("guest %s: %v\n%s", script, err, out)
	}
	return string(out)
}

// TestLinuxClientOps: the stock Linux kernel NFSv3 client creates, writes, reads,
// renames, links, chmods, truncates and removes; lists 2,000 files; moves 64 MiB.
func TestLinuxClientOps(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest.
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	runGuest(t, e, "ops.sh")
	sum, err := os.ReadFile(e.path("big.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(e.path("big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != strings.TrimSpace(string(sum)) {
		t.Fatalf("64 MiB file on the server: sha256 %s, guest computed %s", got, sum)
	}
}

// TestLinuxClientNonRoot: as uid 1000 in the guest, files are owned by 1000, and
// root's files are protected with EACCES.
func TestLinuxClientNonRoot(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest.
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	runGuest(t, e, "nonroot.sh")
	var st syscall.Stat_t
	if err := syscall.Stat(e.path("open/mine"), &st); err != nil || st.Uid != 1000 {
		t.Fatalf("open/mine on the server: %v uid %d", err, st.Uid)
	}
}
