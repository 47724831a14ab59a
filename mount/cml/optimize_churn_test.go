package cml

import (
	"fmt"
	"testing"

	"snfs/snfs1"
)

// numbered gives recs their LSNs from 1 and each making record its LSN as
// provisional id.
func numbered(recs []snfs1.CMLRecord) []snfs1.CMLRecord {
	for i := range recs {
		recs[i].LSN = uint64(i + 1)
		if makes(recs[i].Op) {
			recs[i].New = uint64(i + 1)
		}
	}
	return recs
}

func keptLSNs(out []snfs1.CMLRecord) string {
	var lsns []uint64
	for _, r := range out {
		lsns = append(lsns, r.LSN)
	}
	return fmt.Sprint(lsns)
}

// TestOptimizeChurn: a build's churn (an object written to a temporary
// name, renamed into place, over an older one, removed) in a directory the
// log made: that directory was empty when made, so every name in it is
// the log's and a file made and removed before reintegration costs
// nothing, even when renamed over another of the log's files. A RENAME
// over a name the log does not know (a server directory's) still keeps
// its file, and so does a RENAME over a file of the log's that keeps
// another name.
func TestOptimizeChurn(t *testing.T) {
	d := pv(1) // the directory of the cases that make one first
	mkdirD := mk(snfs1.CMLMkdir, dD, "obj")
	for _, c := range []struct {
		name string
		recs []snfs1.CMLRecord
		keep string
	}{
		{"made, renamed into place, removed: nothing but the directory", []snfs1.CMLRecord{
			mkdirD, mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"), mk(snfs1.CMLUnlink, d, "m")}, "[1]"},
		{"made again over the first: the first costs nothing", []snfs1.CMLRecord{
			mkdirD, mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"),
			mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m")}, "[1 4 5]"},
		{"and then removed: neither", []snfs1.CMLRecord{
			mkdirD, mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"),
			mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"), mk(snfs1.CMLUnlink, d, "m")}, "[1]"},
		{"the directory removed at the end too: everything", []snfs1.CMLRecord{
			mkdirD, mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"),
			mk(snfs1.CMLCreate, d, "m.tmp"), mv(d, "m.tmp", d, "m"), mk(snfs1.CMLUnlink, d, "m"), mk(snfs1.CMLRmdir, dD, "obj")}, "[]"},
		{"in a server directory the name may be the server's: kept", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "m.tmp"), mv(dD, "m.tmp", dD, "m"), mk(snfs1.CMLUnlink, dD, "m")}, "[1 2 3]"},
		{"over a file of the log's that keeps another name: kept", []snfs1.CMLRecord{
			mkdirD, mk(snfs1.CMLCreate, d, "a"), ln(pv(2), d, "b"), mk(snfs1.CMLCreate, d, "t"), mv(d, "t", d, "a"),
			mk(snfs1.CMLUnlink, d, "a")}, "[1 2 3 4 5 6]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := keptLSNs(Optimize(numbered(c.recs))); got != c.keep {
				t.Fatalf("kept %s, want %s", got, c.keep)
			}
		})
	}
}

// TestOptimizeChurnCount: the churn of tests/mount_disconnected_cml_test.go's
// buildChurn (60 objects, 40 names: 20 replaced, every seventh removed) in
// a directory made offline: what is kept is the directory and, for each
// name that survives, the last object's CREATE and RENAME.
func TestOptimizeChurnCount(t *testing.T) {
	d := pv(1)
	recs := []snfs1.CMLRecord{mk(snfs1.CMLMkdir, dD, "obj")}
	live := map[string]bool{}
	for k := range 60 {
		name := fmt.Sprintf("m%d.o", k%40)
		recs = append(recs, mk(snfs1.CMLCreate, d, name+".tmp"), mv(d, name+".tmp", d, name))
		live[name] = true
		if k%7 == 3 {
			recs = append(recs, mk(snfs1.CMLUnlink, d, name))
			delete(live, name)
		}
	}
	out, cancelled, _ := optimize(numbered(recs))
	if want := 1 + 2*len(live); len(out) != want || cancelled != len(recs)-want {
		t.Fatalf("%d records: %d kept, %d cancelled; want %d kept", len(recs), len(out), cancelled, want)
	}
}
