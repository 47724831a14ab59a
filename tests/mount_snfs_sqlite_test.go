package tests

import (
	"bytes"
	"fmt"
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
	t.Parallel()
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
		cmd := command(sqlite, "-bail", path)
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// Each transaction also logs (mount, its number, the count it made): on
	// a wrong count the log tells a stale read under the lock (two rows with
	// one count) from a lost transaction (a number missing: rolled back by a
	// journal played back, or writes that never reached the server).
	if out, err := run(dbs[0], "PRAGMA journal_mode=DELETE;\nCREATE TABLE c(n INTEGER);\nINSERT INTO c VALUES(0);\n"+
		"CREATE TABLE log(m INTEGER, k INTEGER, n INTEGER);\n"); err != nil {
		t.Fatalf("create: %v: %s", err, out)
	}
	var wg sync.WaitGroup
	for m, p := range dbs {
		var script strings.Builder
		script.WriteString(".timeout 120000\n")
		for k := range n {
			fmt.Fprintf(&script, "BEGIN IMMEDIATE;\nUPDATE c SET n = n + 1;\nINSERT INTO log SELECT %d, %d, n FROM c;\nCOMMIT;\n", m, k)
		}
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
	// A journal left behind is played back by the next reader (a hot
	// journal): it undoes every transaction since the one that wrote it.
	var journals []string
	for _, p := range dbs {
		if st, err := os.Stat(p + "-journal"); err == nil {
			journals = append(journals, fmt.Sprintf("%s-journal: %d bytes, mtime %v", p, st.Size(), st.ModTime()))
		}
	}
	for _, p := range dbs {
		out, err := run(p, "SELECT n FROM c;\nPRAGMA integrity_check;\n")
		if err != nil {
			t.Fatalf("check through %s: %v: %s", p, err, out)
		}
		if want := strconv.Itoa(len(dbs)*n) + "\nok\n"; out != want {
			lost, _ := run(p, ".mode list\nSELECT 'rows', count(*) FROM log;\n"+
				"SELECT 'same count', n, group_concat(m || '#' || k, ' ') FROM log GROUP BY n HAVING count(*) > 1 LIMIT 20;\n"+
				"SELECT 'per mount', m, count(*), min(k), max(k) FROM log GROUP BY m;\n"+
				"SELECT 'missing after', a.m, a.k FROM log a WHERE a.k < "+strconv.Itoa(n-1)+
				" AND NOT EXISTS (SELECT 1 FROM log b WHERE b.m = a.m AND b.k = a.k + 1) LIMIT 20;\n")
			var others []string // does every mount see the same?
			for _, q := range dbs {
				o, _ := run(q, "SELECT n FROM c;\n")
				others = append(others, q+": "+strings.TrimSpace(o))
			}
			t.Fatalf("through %s: %q, want %q (count of %d x %d increments, integrity ok); the transactions' log:\n%s\njournals seen before the check: %q; counts through each mount: %q", p, out, want, len(dbs), n, lost, journals, others)
		}
	}
}
