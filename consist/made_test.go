package consist

import (
	"bytes"
	"testing"

	"snfs/snfs1"
)

// TestMadeDurable: the made handles are committed with the last applied
// LSN and survive a reopen; a name with none recorded (a database from
// before them) says so; a BeginLSN (nil made) leaves them; UNREGISTER
// forgets them.
func TestMadeDurable(t *testing.T) {
	dir := diskDir(t)
	r, err := openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.madeHandles("host-a"); err != nil || ok {
		t.Fatalf("nothing recorded yet: ok %v, %v", ok, err)
	}
	made := map[uint64]Made{3: {Prov: 3, FH: []byte{1, 2, 3}}, 5: {Prov: 0, FH: bytes.Repeat([]byte{9}, 64)}}
	if err := r.updateLSN("host-a", 5, 0, nil, false, made); err != nil {
		t.Fatal(err)
	}
	if err := r.updateLSN("host-a", 5, 9, nil, false, nil); err != nil { // a batch begins
		t.Fatal(err)
	}
	r.close()
	r, err = openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	got, ok, err := r.madeHandles("host-a")
	if err != nil || !ok || len(got) != 2 {
		t.Fatalf("after reopen: %v %v %v", got, ok, err)
	}
	for lsn, m := range made {
		if g := got[lsn]; g.Prov != m.Prov || !bytes.Equal(g.FH, m.FH) {
			t.Errorf("LSN %d: %+v, recorded %+v", lsn, g, m)
		}
	}
	if last, pending, _, err := r.lastLSN("host-a"); err != nil || last != 5 || pending != 9 {
		t.Fatalf("last %d pending %d %v", last, pending, err)
	}
	if err := r.updateLSN("host-a", 9, 0, nil, false, map[uint64]Made{}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := r.madeHandles("host-a"); err != nil || !ok || len(got) != 0 {
		t.Fatalf("an empty set recorded: %v %v %v", got, ok, err)
	}
	id, _, err := r.register("host-a", snfs1.Verifier{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.unregister(map[string]snfs1.ClientID{"host-a": id.id}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := r.madeHandles("host-a"); ok {
		t.Fatal("kept past UNREGISTER")
	}
}
