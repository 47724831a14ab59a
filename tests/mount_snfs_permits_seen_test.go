package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"snfs/nfs3"
)

// TestMountSNFSPermitsSeenAtOnce: what mount A's applications did under its
// write-back permit (create with data, rename, mkdir, remove; all logged
// locally, with the data of files made locally kept local) is seen by
// mount B and by a stock NFSv3 client the moment they look: their reads of
// the directory recall A's permit first, and are answered once A's log and
// data are in (docs/protocol.md section 21.4, "Reads recall too"); A then
// works on, asking for the permit again. No change is waited for by time.
func TestMountSNFSPermitsSeenAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitDataMount(t, e, "A", "")
	b := newPermitDataMount(t, e, "B", "")
	for _, m := range []*snfsMount{a, b} {
		if _, err := os.ReadDir(m.path("d")); err != nil {
			t.Fatal(err)
		}
	}
	D := e.lookup(e.root, "d")
	for round := range 5 {
		f, g, sub := fmt.Sprintf("f%d", round), fmt.Sprintf("g%d", round), fmt.Sprintf("sub%d", round)
		data := bytes.Repeat([]byte{byte('a' + round)}, 100+round*1000)
		if err := os.WriteFile(a.path("d/"+f), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(a.path("d/"+f), a.path("d/"+g)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(a.path("d/"+sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if round > 0 {
			if err := os.Remove(a.path(fmt.Sprintf("d/g%d", round-1))); err != nil {
				t.Fatal(err)
			}
		}
		// B: a listing, a stat and a read, at once.
		checkNames(t, fmt.Sprintf("round %d: B's listing", round), b.path("d"), 0, expectNames(round), []string{f, fmt.Sprintf("g%d", round-1)})
		if got, err := os.ReadFile(b.path("d/" + g)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: B reads %s: %d bytes, %v; want %d", round, g, len(got), err, len(data))
		}
		// A stock client's LOOKUP and READDIR.
		if _, err := e.nfs.Lookup(ctx, D, sub); err != nil {
			t.Fatalf("round %d: a stock client's LOOKUP of %s: %v", round, sub, err)
		}
		res, err := e.nfs.Lookup(ctx, D, g)
		if err != nil || res.Status != nfs3.OK {
			t.Fatalf("round %d: a stock client's LOOKUP of %s: %v %v", round, g, res.Status, err)
		}
		names := fmt.Sprint(plainNames(t, e, D))
		if want := fmt.Sprint(expectNames(round)); names != want {
			t.Fatalf("round %d: a stock client lists %s, want %s", round, names, want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "d", "g4")); err != nil {
		t.Fatalf("the export: %v", err)
	}
}

// expectNames is d's listing after round of TestMountSNFSPermitsSeenAtOnce.
func expectNames(round int) []string {
	var out []string
	out = append(out, fmt.Sprintf("g%d", round))
	for k := 0; k <= round; k++ {
		out = append(out, fmt.Sprintf("sub%d", k))
	}
	return out
}
