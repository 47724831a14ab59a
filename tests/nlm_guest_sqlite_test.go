package tests

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLinuxClientSQLite: two snfs mounts and the Linux guest's kernel client
// (its locks through NLM, guestCallbacks) each run N transactions that
// increment one counter in one SQLite database in rollback-journal mode, at
// once: the final count is exact and PRAGMA integrity_check is ok, through
// each mount and on the server. N is sqliteCounter's (SNFS_SQLITE_TXNS; the
// issue's long run: 1000).
func TestLinuxClientSQLite(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest and the host's port 111.
	requireRoot(t)
	guestRunner(t)
	requireGuestLockTools(t, "sqlite3")
	sqlite, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Fatal(err)
	}
	n := 200 // per client, as sqliteCounter's
	if v := os.Getenv("SNFS_SQLITE_TXNS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("SNFS_SQLITE_TXNS=%q: want a positive number", v)
		}
	}
	g := newGuestCallbacks(t)
	e := newGuestLockEnv(t, g, 0)
	hostRPCBind(t, e.port())
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	run := func(path, script string) (string, error) {
		cmd := command(sqlite, "-bail", path)
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run(a.path("db"), "PRAGMA journal_mode=DELETE;\nCREATE TABLE c(n INTEGER);\nINSERT INTO c VALUES(0);\n"); err != nil {
		t.Fatalf("create: %v: %s", err, out)
	}
	var script strings.Builder
	script.WriteString(".timeout 120000\n")
	for range n {
		script.WriteString("BEGIN IMMEDIATE;\nUPDATE c SET n = n + 1;\nCOMMIT;\n")
	}
	if err := os.WriteFile(e.path("sqlite.sql"), []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := guestLockRun(t, e, g, "sqlite.sh")
	guestWaitFile(t, e, out, "guest.ready")
	if err := os.WriteFile(e.path("go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for i, p := range []string{a.path("db"), b.path("db")} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := run(p, script.String()); err != nil {
				t.Errorf("%s: %v: %s", p, err, out)
			}
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	tr := guestDone(t, out)
	all := time.Since(start)
	if t.Failed() {
		return
	}
	for _, p := range []string{a.path("db"), b.path("db"), e.path("db")} {
		out, err := run(p, "SELECT n FROM c;\nPRAGMA integrity_check;\n")
		if err != nil {
			t.Fatalf("check through %s: %v: %s", p, err, out)
		}
		if want := strconv.Itoa(3*n) + "\nok\n"; out != want {
			t.Fatalf("through %s: %q, want %q (count of 3 x %d increments, integrity ok)", p, out, want, n)
		}
	}
	t.Logf("guest transcript:\n%s", tr)
	t.Logf("3 x %d transactions: count %d, integrity ok; mounts A and B done after %v and %v, all (with the guest) after %v",
		n, 3*n, took[0], took[1], all)
}
