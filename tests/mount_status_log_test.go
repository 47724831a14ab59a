package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMountStatusLog: what snfs status and the gauges say of write-back
// permits and the modification log (Coda's cfs lsv and listcml) while a
// mount holds a permit with changes logged under it: the permit and its
// directory, the records, their bytes and the oldest's age, in the JSON, the
// text and snfs_client_permits_held / snfs_client_cml_*; and an empty log
// after the directory's fsync sends it.
func TestMountStatusLog(t *testing.T) {
	t.Parallel()
	s := newServeProc(t)
	if err := os.Mkdir(s.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "")
	bin := snfsBinary(t)
	// The first changes may go through the server while it probes the
	// callback path before granting the permit: made until one is logged.
	// The log goes by itself once its oldest record is 5 s old: a round
	// whose checks found it gone (a loaded machine) is made again.
	made := 0
	logged := func() bool {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := os.WriteFile(m.path(fmt.Sprintf("d/f%d", made)), []byte("logged"), 0o644); err != nil {
				t.Fatal(err)
			}
			made++
			if st := statusOf(t, bin, m.dir); st.SNFS != nil && st.SNFS.Log.Records > 0 {
				return true
			}
			if time.Now().After(deadline) {
				t.Fatalf("no change logged after %d creates in d", made)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for round := 1; ; round++ {
		logged()
		for k := 0; k < 3; k++ { // more under the permit held
			if err := os.Mkdir(m.path(fmt.Sprintf("d/sub%d-%d", round, k)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond) // an age above 0
		st := statusOf(t, bin, m.dir)
		g := gauges(t, m.metrics)
		out, code := runIn(t, bin, "/", "status", m.dir)
		sn := st.SNFS
		if sn != nil && (sn.Log.Records < 4 || g["snfs_client_cml_records"] < 4 || !strings.Contains(out, " records, ")) && round < 3 {
			t.Logf("round %d: the log went (its age) before the checks: made again", round)
			continue
		}
		if sn == nil || !sn.Permits.InUse || sn.Permits.Held < 1 || !sn.Log.InUse || sn.Log.Records < 4 || sn.Log.Bytes <= 0 || sn.Log.OldestSeconds <= 0 {
			t.Fatalf("status with a permit held and changes logged: %+v", sn)
		}
		found := false
		for _, h := range sn.Permits.Dirs {
			found = found || h.Dir == "/d" || strings.HasSuffix(h.Dir, "/d")
		}
		if !found {
			t.Fatalf("the permits held name no directory d: %+v", sn.Permits.Dirs)
		}
		if g["snfs_client_permits_held"] < 1 || g["snfs_client_cml_records"] < 4 || g["snfs_client_cml_bytes"] <= 0 || g["snfs_client_cml_oldest_seconds"] <= 0 {
			t.Fatalf("gauges with a permit held and changes logged: permits %v, records %v, bytes %v, oldest %v s", g["snfs_client_permits_held"],
				g["snfs_client_cml_records"], g["snfs_client_cml_bytes"], g["snfs_client_cml_oldest_seconds"])
		}
		if code != 0 || !strings.Contains(out, "write-back permits:     ") || strings.Contains(out, "write-back permits:     none") ||
			!strings.Contains(out, "modification log:       ") || !strings.Contains(out, " records, ") || !strings.Contains(out, ", the oldest ") {
			t.Fatalf("snfs status with changes logged: exit %d:\n%s", code, out)
		}
		break
	}

	// A directory's fsync sends the log.
	f, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st := statusOf(t, bin, m.dir)
	if st.SNFS.Log.Records != 0 || st.SNFS.Log.OldestSeconds != 0 {
		t.Fatalf("status after the directory's fsync: %+v", st.SNFS.Log)
	}
	if g := gauges(t, m.metrics); g["snfs_client_cml_records"] != 0 || g["snfs_client_cml_oldest_seconds"] != 0 {
		t.Errorf("gauges after the directory's fsync: records %v, oldest %v s", g["snfs_client_cml_records"], g["snfs_client_cml_oldest_seconds"])
	}
	if out, code := runIn(t, bin, "/", "status", m.dir); code != 0 || !strings.Contains(out, "modification log:       empty\n") {
		t.Errorf("snfs status after the directory's fsync: exit %d:\n%s", code, out)
	}
	for k := 0; k < made; k++ {
		if got, err := os.ReadFile(s.path(fmt.Sprintf("d/f%d", k))); err != nil || string(got) != "logged" {
			t.Fatalf("the export's d/f%d after the fsync: %q, %v", k, got, err)
		}
	}
}
