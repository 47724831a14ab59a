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

// TestMountSNFSSQLite: two snfs mounts of one export each run N transactions
// that increment one counter in one SQLite database in rollback-journal mode
// (SQLite's fcntl locks through the mounts, the data through their caches):
// the final count is exact and PRAGMA integrity_check is ok.
func TestMountSNFSSQLite(t *testing.T) {
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	sqliteCounter(t, a.path("db"), b.path("db"))
}

// sqliteCounter creates a counter database at dbs[0] and runs N transactions
// incrementing it through each of dbs (one database through several mounts)
// at once, then checks the count and the integrity through each.
func sqliteCounter(t *testing.T, dbs ...string) {
	t.Helper()
	sqlite, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Fatal("sqlite3 is not installed (apt-get install sqlite3): it is how this test drives SQLite")
	}
	n := 200 // per mount; SNFS_SQLITE_TXNS overrides it (the long run: 1000)
	if v := os.Getenv("SNFS_SQLITE_TXNS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("SNFS_SQLITE_TXNS=%q: want a positive number", v)
		}
	}
	run := func(path, script string) (string, error) {
		cmd := exec.Command(sqlite, "-bail", path)
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run(dbs[0], "PRAGMA journal_mode=DELETE;\nCREATE TABLE c(n INTEGER);\nINSERT INTO c VALUES(0);\n"); err != nil {
		t.Fatalf("create: %v: %s", err, out)
	}
	var script strings.Builder
	script.WriteString(".timeout 120000\n")
	for range n {
		script.WriteString("BEGIN IMMEDIATE;\nUPDATE c SET n = n + 1;\nCOMMIT;\n")
	}
	var wg sync.WaitGroup
	for _, p := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := run(p, script.String()); err != nil {
				t.Errorf("%s: %v: %s", p, err, out)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, p := range dbs {
		out, err := run(p, "SELECT n FROM c;\nPRAGMA integrity_check;\n")
		if err != nil {
			t.Fatalf("check through %s: %v: %s", p, err, out)
		}
		if want := strconv.Itoa(len(dbs)*n) + "\nok\n"; out != want {
			t.Fatalf("through %s: %q, want %q (count of %d x %d increments, integrity ok)", p, out, want, len(dbs), n)
		}
	}
}
