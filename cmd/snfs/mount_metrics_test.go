package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMountMetricsCommand runs the real binary: `snfs serve`, `snfs mount
// --mode=snfs --metrics`, some I/O through the mount, a scrape of the
// mount's metrics and `snfs stat` against it.
func TestMountMetricsCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-mmetrics-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	export, mnt, cache := filepath.Join(base, "export"), filepath.Join(base, "mnt"), filepath.Join(base, "cache")
	for _, d := range []string{export, mnt, cache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nfsPort, pmPort := freePort(t), freePort(t)
	srv := exec.Command(bin, "serve", "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(nfsPort), "--mount-port", fmt.Sprint(nfsPort),
		"--portmap-port", fmt.Sprint(pmPort), "--state-dir", filepath.Join(base, "state"),
		"--export-options", "rw,no_root_squash", export)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var out []byte
	for try := 0; ; try++ { // until the server answers
		// --permits=off: the delayed write-back of a file made through
		// CREATE_OPEN (with permits, it reaches the server with its log).
		out, err = exec.Command(bin, "mount", "--mode=snfs", "--permits=off", "--nfs-port", fmt.Sprint(nfsPort), "--mount-port", fmt.Sprint(nfsPort),
			"--cache-dir", cache, "--writeback-delay", "1h", "--metrics", metricsAddr, "127.0.0.1:"+export, mnt).CombinedOutput()
		if err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("snfs mount: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer exec.Command(bin, "umount", mnt).Run()

	// Written back by fsync; dirty (an hour's delay); cancelled by unlink;
	// read again after the kernel's pages are dropped.
	data := make([]byte, 100<<10)
	for i := range data {
		data[i] = byte(i)
	}
	f, err := os.Create(filepath.Join(mnt, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(mnt, "dirty"), data[:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "temp"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "temp")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	if b, err := os.ReadFile(filepath.Join(mnt, "synced")); err != nil || len(b) != len(data) {
		t.Fatalf("read back: %d bytes, %v", len(b), err)
	}
	// A listing under a promise (a fill of the name cache).
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels ...string) float64 {
		f := fams[name]
		if f == nil {
			t.Errorf("no family %s", name)
			return 0
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				ok := false
				for _, l := range m.GetLabel() {
					ok = ok || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !ok {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
		t.Errorf("no series %s%v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"snfs_client_rpc_total", []string{"program", "snfs", "version", "1", "proc", "CREATE_OPEN"}},
		{"snfs_client_rpc_total", []string{"program", "snfs", "version", "1", "proc", "REGISTER"}},
		{"snfs_client_rpc_total", []string{"program", "mount", "version", "3", "proc", "MNT"}},
		{"snfs_client_rpc_total", []string{"program", "nfs", "version", "3", "proc", "WRITE"}},
		{"snfs_client_rpc_total", []string{"program", "nfs", "version", "3", "proc", "COMMIT"}},
		{"snfs_client_written_back_bytes_total", nil},
		{"snfs_client_writebacks_cancelled_total", nil},
		{"snfs_client_dirty_bytes", nil},
	} {
		if v := value(c.name, c.labels...); v <= 0 {
			t.Errorf("%s%v = %v, want > 0", c.name, c.labels, v)
		}
	}
	if v := value("snfs_client_written_back_bytes_total"); v < float64(len(data)) {
		t.Errorf("written back %v bytes, want >= %d", v, len(data))
	}
	if v := value("snfs_client_dirty_bytes"); v != 5000 {
		t.Errorf("dirty bytes %v, want 5000", v)
	}
	value("snfs_client_cache_hits_total")
	t.Logf("cache hits %v (%v bytes)", value("snfs_client_cache_hits_total"), value("snfs_client_cache_hit_bytes_total"))
	for _, mode := range []string{"WRITEBACK", "INVALIDATE", "WRITEBACK_INVALIDATE", "RELINQUISH"} {
		value("snfs_client_callbacks_total", "mode", mode)
	}
	for _, e := range []string{"hit", "miss", "fill", "break", "eviction", "release", "renewal"} {
		value("snfs_client_name_cache_events_total", "event", e)
	}
	if v := value("snfs_client_name_cache_events_total", "event", "fill"); v < 1 {
		t.Errorf("name cache fills %v after a listing, want > 0", v)
	}

	out, err = exec.Command(bin, "stat", "--metrics", metricsAddr).CombinedOutput()
	t.Logf("snfs stat:\n%s", out)
	if err != nil {
		t.Fatalf("snfs stat: %v", err)
	}
	for _, want := range []string{"client calls:", "procedure", "CREATE_OPEN", "COMMIT", "MNT", "bytes written back:", "dirty bytes:", "callbacks RELINQUISH:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("snfs stat lacks %q", want)
		}
	}
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("snfs umount: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(export, "dirty")); err != nil || len(b) != 5000 {
		t.Errorf("after umount the export has %d bytes of dirty, %v", len(b), err)
	}
}
