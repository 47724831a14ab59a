package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMountSNFSAppendServerKills: two snfs-mode mounts append lines to one
// file at once (each line an open with O_APPEND, a write and a close: the
// file is write-shared, so every append is an APPEND call) while the server
// is killed with SIGKILL and started again, over and over. Every line whose
// write and close returned is in the file exactly once, whole; a line whose
// write failed is in it at most once. An APPEND in flight at a kill is sent
// again to the next server with the same xid: applied before the kill, it
// must not be applied again (server/appendintent.go).
func TestMountSNFSAppendServerKills(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SNFS_APPEND_KILL_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rounds := 8
	if longRun() {
		rounds = 30
	}
	t.Logf("seed %d (SNFS_APPEND_KILL_SEED replays the kill times' draws), %d kills", seed, rounds)
	s := newServeProc(t, "--grace", "2s")
	if err := os.WriteFile(s.path("log"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After the mounts' unmounts (cleanups run last first): every
		// append went through the protocol, so no write-back may find the
		// file changed under it. A conflict copy here held acknowledged
		// lines the file lacked (an OPEN racing a CB_TREAT_AS_CLOSED
		// answer: client/handback.go).
		names, _ := filepath.Glob(s.path("log.snfs-conflict-*"))
		for _, n := range names {
			t.Errorf("conflict copy %s: no client wrote the file outside the protocol", filepath.Base(n))
		}
	})
	mnts := []*mntProc{startMount(t, s, "", ""), startMount(t, s, "", "")}
	var (
		stop   atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		acked  = map[string]bool{} // write and close returned
		failed = map[string]bool{} // the write or the close failed
	)
	for k, m := range mnts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				line := fmt.Sprintf("m%d-%06d %s\n", k, n, strings.Repeat("x", n%97))
				f, err := os.OpenFile(m.path("log"), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					continue // not written: nothing to check
				}
				_, werr := f.WriteString(line)
				cerr := f.Close()
				mu.Lock()
				if werr == nil && cerr == nil {
					acked[line] = true
				} else {
					failed[line] = true
				}
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for range rounds {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		if err := s.kill9(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		s.start()
	}
	time.Sleep(2 * time.Second) // appends after the last restart
	stop.Store(true)
	wg.Wait()
	data, err := os.ReadFile(s.path("log"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if len(l) > 0 {
			count[string(l)]++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 50 {
		t.Fatalf("only %d appends returned: too few to tell", len(acked))
	}
	bad := 0
	for l, n := range count {
		switch {
		case acked[l] && n == 1, failed[l] && n == 1:
		case bad < 10:
			bad++
			t.Errorf("line %q is in the file %d times (acknowledged %v)", strings.TrimSpace(l)[:min(12, len(l)-1)], n, acked[l])
		}
	}
	for l := range acked {
		if count[l] == 0 && bad < 10 {
			bad++
			t.Errorf("acknowledged line %q is not in the file", strings.TrimSpace(l)[:min(12, len(l)-1)])
		}
	}
	t.Logf("%d appends acknowledged, %d failed, %d kills", len(acked), len(failed), rounds)
}
