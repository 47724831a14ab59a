package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/sunrpc"
)

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServeCommand runs the real binary: serve a directory, use it, read the
// metrics and `snfs stat`, then SIGTERM: it must exit 0.
func TestServeCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("/var/tmp", "snfs-cli-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	nfsPort, mntPort, pmPort, mPort := freePort(t), freePort(t), freePort(t), freePort(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", mPort)
	cmd := exec.Command(bin, "serve", "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(nfsPort), "--mount-port", fmt.Sprint(mntPort),
		"--portmap-port", fmt.Sprint(pmPort), "--state-dir", filepath.Join(dir, "state"), "--metrics", metricsAddr,
		"--export-options", "rw,no_root_squash", "--log-level", "debug", filepath.Join(dir))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var m *client.Mounter
	for {
		if m, err = client.DialMount(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", mntPort)); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("server did not come up:", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, dir)
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	c, err := client.DialNFS(ctx, "udp", fmt.Sprintf("127.0.0.1:%d", nfsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mode := uint32(0o644)
	cr, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: res.FH, Name: "f"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	if err != nil || cr.Status != nfs3.OK {
		t.Fatalf("CREATE over UDP: %v %v", err, cr.Status)
	}
	w, err := c.Write(ctx, cr.Object, 0, []byte("x"), nfs3.FileSync)
	if err != nil || w.Status != nfs3.OK {
		t.Fatalf("WRITE: %v %v", err, w.Status)
	}
	// The port mapper knows both services.
	pc, err := sunrpc.Dial(ctx, "udp", fmt.Sprintf("127.0.0.1:%d", pmPort), portmap.Program, portmap.Version)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if p, err := portmap.GetPort(ctx, pc, nfs3.Program, nfs3.Version, portmap.ProtoTCP); err != nil || p != uint32(nfsPort) {
		t.Fatalf("GETPORT nfs = %d, %v", p, err)
	}
	// NLM v4 and NSM v1 are on the NFS port: a Linux client's lockd finds the
	// server's lock manager through the port mapper.
	for _, p := range []struct{ prog, vers, prot uint32 }{{nlm4.Program, nlm4.Version, portmap.ProtoTCP},
		{nlm4.Program, nlm4.Version, portmap.ProtoUDP}, {nsm.Program, nsm.Version, portmap.ProtoUDP}} {
		if port, err := portmap.GetPort(ctx, pc, p.prog, p.vers, p.prot); err != nil || port != uint32(nfsPort) {
			t.Fatalf("GETPORT %d v%d proto %d = %d, %v; want the NFS port %d", p.prog, p.vers, p.prot, port, err, nfsPort)
		}
	}
	nc, err := sunrpc.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", nfsPort), nlm4.Program, nlm4.Version)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Call(ctx, nlm4.ProcNull, nil, nil); err != nil {
		t.Fatalf("NLM NULL: %v", err)
	}
	if maps, err := portmap.Dump(ctx, pc); err != nil || len(maps) < 8 {
		t.Fatalf("DUMP = %v, %v", maps, err)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`snfs_server_rpc_total{proc="WRITE",program="nfs",version="3"} 1`,
		`snfs_server_rpc_duration_seconds_bucket{proc="CREATE",program="nfs",version="3",le="+Inf"} 1`,
		`snfs_server_fsync_total{export="` + dir + `"}`, `snfs_server_write_gather_batch_size_count{export="` + dir + `"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	out, err := exec.Command(bin, "stat", "--metrics", metricsAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "WRITE") || !strings.Contains(string(out), "procedure") {
		t.Fatalf("snfs stat: %v\n%s", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("snfs serve after SIGTERM: %v (want exit 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("snfs serve did not exit after SIGTERM")
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--write-gather", "sometimes", "/tmp"},
		{"--export-options", "rw,bogus", "/tmp"},
		{},
	} {
		if err := serve(args); err == nil {
			t.Errorf("serve %v: no error", args)
		}
	}
}

// TestRpcbindRegistration runs a real rpcbind in a private network namespace
// (and /run) and `snfs serve` in the same network namespace: NFS and MOUNT are registered while it runs
// and unregistered when it stops.
func TestRpcbindRegistration(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	for _, tool := range []string{"ip", "rpcbind", "rpcinfo", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (.ci/run installs iproute2 and rpcbind)", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ns := fmt.Sprintf("snfs-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up").Run()
	// Its own /run too: rpcbind's lock and socket there are the machine's,
	// which another rpcbind (ganesha-peer's, in tests/) may hold at the same
	// time; the registrations go over TCP to 127.0.0.1:111 in the namespace.
	rpcb := exec.Command("ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private",
		"sh", "-c", "mount -t tmpfs snfs-test-run /run && exec rpcbind -f")
	rpcb.Stderr = os.Stderr
	if err := rpcb.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		rpcb.Process.Signal(syscall.SIGTERM)
		rpcb.Wait()
	}()
	rpcinfo := func() string {
		out, _ := exec.Command("ip", "netns", "exec", ns, "rpcinfo", "-p", "127.0.0.1").CombinedOutput()
		return string(out)
	}
	for i := 0; !strings.Contains(rpcinfo(), "portmapper"); i++ {
		if i > 50 {
			t.Fatal("rpcbind did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	dir, err := os.MkdirTemp("/var/tmp", "snfs-rpcb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv := exec.Command("ip", "netns", "exec", ns, bin, "serve", "--nfs-port", "2049", "--mount-port", "20048",
		"--state-dir", filepath.Join(dir, "state"), dir)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var out string
	for i := 0; ; i++ {
		out = rpcinfo()
		if strings.Contains(out, "100003    3   tcp   2049") && strings.Contains(out, "100005    3   tcp  20048") &&
			strings.Contains(out, "100021    4   tcp   2049") && strings.Contains(out, "100021    4   udp   2049") &&
			strings.Contains(out, "100024    1   udp   2049") {
			break
		}
		if i > 50 {
			t.Fatalf("not registered:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	if out = rpcinfo(); strings.Contains(out, "100003") || strings.Contains(out, "100005") || strings.Contains(out, "100021") {
		t.Fatalf("still registered after stopping:\n%s", out)
	}
}
