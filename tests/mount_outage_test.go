package tests

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/fusefs"
)

// TestMountServerNotResponding: a mount reaches its server through a proxy
// that stops moving bytes (a partition) while several applications wait on
// the mount. The mount logs "server ADDR not responding, still trying" once
// per outage, however many calls wait, and "server ADDR OK" once when the
// server answers again; nothing of the kind while the server answers. Both
// modes (nfs: the NFS client's connection; snfs: the session's).
func TestMountServerNotResponding(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each its own server, proxy and mount
			requireFUSE(t)
			e := newEnv(t, "rw,no_root_squash")
			p := newProxy(t, e.addr)
			logBuf := &lockedBuffer{}
			log := slog.New(slog.NewTextHandler(logBuf, nil))
			dir := outageMount(t, e, mode, p.Addr(), log)
			t.Cleanup(p.Heal) // a failure during a partition: the unmount needs the server
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("mount log:\n%s", logBuf)
				}
			})
			down := "server " + p.Addr() + " not responding, still trying"
			up := "server " + p.Addr() + " OK"
			if err := os.WriteFile(filepath.Join(dir, "before"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			for outage := 1; outage <= 2; outage++ {
				p.Partition(0)
				var wg sync.WaitGroup
				errs := make(chan error, 3)
				for k := 0; k < 3; k++ { // three applications, each waiting on the server
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs <- os.WriteFile(filepath.Join(dir, fmt.Sprintf("during-%d-%d", outage, k)), []byte("y"), 0o644)
					}()
				}
				// The report comes once the calls waited the threshold; on a
				// loaded machine the applications' calls may reach the
				// mount late, so wait for it (bounded), then three more
				// thresholds while the calls still wait: the check runs
				// again and again, and must not report again.
				for end := time.Now().Add(20 * time.Second); strings.Count(logBuf.String(), down) < outage && time.Now().Before(end); {
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(3 * time.Second)
				if n := strings.Count(logBuf.String(), down); n != outage {
					t.Fatalf("outage %d: %q logged %d times during it; want %d", outage, down, n, outage)
				}
				if n := strings.Count(logBuf.String(), up); n != outage-1 {
					t.Fatalf("outage %d: %q logged %d times during it; want %d", outage, up, n, outage-1)
				}
				p.Heal()
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("outage %d: a write waiting through the outage: %v", outage, err)
					}
				}
				// The server answers: the mount keeps working, no new report.
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("after-%d", outage)), []byte("z"), 0o644); err != nil {
					t.Fatal(err)
				}
				l := logBuf.String()
				if nd, nu := strings.Count(l, down), strings.Count(l, up); nd != outage || nu != outage {
					t.Fatalf("after outage %d: %q logged %d times, %q %d times; want %d each", outage, down, nd, up, nu, outage)
				}
				if strings.LastIndex(l, up) < strings.LastIndex(l, down) {
					t.Fatalf("after outage %d: %q is not after the last %q", outage, up, down)
				}
			}
		})
	}
}

// outageMount mounts e's export in mode through addr (the proxy) with log and
// a not-responding threshold of 1 s; unmounted when the test ends.
func outageMount(t *testing.T, e *env, mode, addr string, log *slog.Logger) string {
	t.Helper()
	cfg := snfsmount.Config{Addr: addr, Logger: log, NotRespondingAfter: time.Second}
	if mode == "snfs" {
		cfg.WriteBackDelay = time.Hour
		return newSNFSMountWith(t, e, "A", "", cfg, fusefs.Options{}).dir
	}
	return newMountWith(t, e, cfg).dir
}
