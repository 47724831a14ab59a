package cml

import (
	"fmt"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Builders of raw records for the table (LSNs given in order by opt's caller).
var (
	dD = snfs1.ObjRef{FH: nfs3.FH("R")}  // a server directory
	dS = snfs1.ObjRef{FH: nfs3.FH("S1")} // another
	fF = snfs1.ObjRef{FH: nfs3.FH("F1")} // a server file
)

func pv(id uint64) snfs1.ObjRef { return snfs1.ObjRef{Prov: id} }
func u32(v uint32) *uint32      { return &v }
func u64(v uint64) *uint64      { return &v }

func mk(op snfs1.CMLOp, dir snfs1.ObjRef, name string) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: op, Dir: dir, Name: name}
}
func ln(obj, dir snfs1.ObjRef, name string) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: snfs1.CMLLink, Obj: obj, Dir: dir, Name: name}
}
func mv(dir snfs1.ObjRef, name string, to snfs1.ObjRef, toName string) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: snfs1.CMLRename, Dir: dir, Name: name, ToDir: to, ToName: toName}
}
func sa(obj snfs1.ObjRef, a nfs3.Sattr) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: obj, Attr: a}
}

func st(obj snfs1.ObjRef, data string) snfs1.CMLRecord {
	return snfs1.CMLRecord{Op: snfs1.CMLStore, Obj: obj, Data: []byte(data)}
}

// TestStoreCut: a batch carries at most snfs1.ReintegrateStoreMax bytes of
// STORE data (at least one record), and at most snfs1.ReintegrateMax
// records.
func TestStoreCut(t *testing.T) {
	big := make([]byte, snfs1.StoreMax)
	var plan []snfs1.CMLRecord
	for range snfs1.ReintegrateStoreMax/snfs1.StoreMax + 3 {
		plan = append(plan, mk(snfs1.CMLCreate, dD, "x"), snfs1.CMLRecord{Op: snfs1.CMLStore, Obj: fF, Data: big})
	}
	n := storeCut(plan)
	data := 0
	for _, r := range plan[:n] {
		data += len(r.Data)
	}
	if data > snfs1.ReintegrateStoreMax || data+snfs1.StoreMax <= snfs1.ReintegrateStoreMax {
		t.Errorf("the first batch carries %d bytes of STORE data in %d records; want at most %d, and no room for one more", data, n, snfs1.ReintegrateStoreMax)
	}
	if n := storeCut(plan[len(plan)-1:]); n != 1 {
		t.Errorf("a plan of one STORE: a batch of %d", n)
	}
	small := make([]snfs1.CMLRecord, snfs1.ReintegrateMax+5)
	if n := storeCut(small); n != snfs1.ReintegrateMax {
		t.Errorf("a plan of %d records: a batch of %d", len(small), n)
	}
}

// TestOptimizeTable: each rule and each of its exceptions, by the LSNs
// kept (records are numbered from 1; a making record's provisional id is
// its LSN), and the attributes of merged SETATTRs.
func TestOptimizeTable(t *testing.T) {
	mtime := nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: 7}}
	for _, c := range []struct {
		name string
		recs []snfs1.CMLRecord
		keep string // LSNs kept
	}{
		{"create and unlink cancel", []snfs1.CMLRecord{mk(snfs1.CMLCreate, dD, "x"), mk(snfs1.CMLUnlink, dD, "x")}, "[]"},
		{"with its setattrs and renames", []snfs1.CMLRecord{
			mk(snfs1.CMLUnlink, dS, "y"), mk(snfs1.CMLCreate, dD, "x"), sa(pv(2), nfs3.Sattr{Mode: u32(0o600)}), mv(dD, "x", dS, "y"),
			sa(pv(2), nfs3.Sattr{Size: u64(0)}), mk(snfs1.CMLUnlink, dS, "y")}, "[1]"},
		{"a link to a surviving name keeps it", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), ln(pv(1), dS, "y"), mk(snfs1.CMLUnlink, dD, "x")}, "[1 2 3]"},
		{"every name removed: all cancel", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), ln(pv(1), dS, "y"), mk(snfs1.CMLUnlink, dD, "x"), mk(snfs1.CMLUnlink, dS, "y")}, "[]"},
		{"a symlink too", []snfs1.CMLRecord{mk(snfs1.CMLSymlink, dD, "l"), mk(snfs1.CMLUnlink, dD, "l")}, "[]"},
		{"a file's STORE cancels with it", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), st(pv(1), "data"), mk(snfs1.CMLUnlink, dD, "x")}, "[]"},
		{"a surviving file keeps its STORE", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), st(pv(1), "data"), mv(dD, "x", dS, "y")}, "[1 2 3]"},
		{"a STORE parts SETATTRs of its file", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Size: u64(0)}), st(fF, "data"), sa(fF, nfs3.Sattr{Mode: u32(0o600)})}, "[1 2 3]"},
		{"mkdir and rmdir cancel", []snfs1.CMLRecord{mk(snfs1.CMLMkdir, dD, "d"), sa(pv(1), nfs3.Sattr{Mode: u32(0o700)}), mk(snfs1.CMLRmdir, dD, "d")}, "[]"},
		{"with what lived and died inside", []snfs1.CMLRecord{
			mk(snfs1.CMLMkdir, dD, "d"), mk(snfs1.CMLCreate, pv(1), "x"), mk(snfs1.CMLUnlink, pv(1), "x"), mk(snfs1.CMLRmdir, dD, "d")}, "[]"},
		{"a file made inside and moved out keeps the directory", []snfs1.CMLRecord{
			mk(snfs1.CMLMkdir, dD, "d"), mk(snfs1.CMLCreate, pv(1), "x"), mv(pv(1), "x", dD, "x"), mk(snfs1.CMLRmdir, dD, "d")}, "[1 2 3 4]"},
		{"a server file moved through it keeps the directory", []snfs1.CMLRecord{
			mk(snfs1.CMLMkdir, dD, "d"), mv(dD, "f", pv(1), "f"), mv(pv(1), "f", dS, "f"), mk(snfs1.CMLRmdir, dD, "d")}, "[1 2 3 4]"},
		{"a rename over a name the server may have keeps it", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), mv(dD, "x", dD, "y"), mk(snfs1.CMLUnlink, dD, "y")}, "[1 2 3]"},
		{"over a name known gone cancels", []snfs1.CMLRecord{
			mk(snfs1.CMLUnlink, dD, "y"), mk(snfs1.CMLCreate, dD, "x"), mv(dD, "x", dD, "y"), mk(snfs1.CMLUnlink, dD, "y")}, "[1]"},
		{"a name used again", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), mk(snfs1.CMLUnlink, dD, "x"), mk(snfs1.CMLCreate, dD, "x")}, "[3]"},
		{"replaced by another's rename: the rename stays", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), mv(dD, "f", dD, "x")}, "[2]"},
		{"an unlink of a server name stays", []snfs1.CMLRecord{mk(snfs1.CMLUnlink, dD, "f")}, "[1]"},
		{"setattrs collapse", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Mode: u32(0o600)}), sa(fF, nfs3.Sattr{Mtime: mtime}), sa(fF, nfs3.Sattr{Mode: u32(0o640)})}, "[3]"},
		{"of a new file too", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), sa(pv(1), nfs3.Sattr{Mode: u32(0o600)}), mk(snfs1.CMLCreate, dD, "y"), sa(pv(1), nfs3.Sattr{Mtime: mtime})}, "[1 3 4]"},
		{"a size is never moved later", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Size: u64(0)}), sa(fF, nfs3.Sattr{Mode: u32(0o600)})}, "[1 2]"},
		{"but may be merged into", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Mode: u32(0o600)}), sa(fF, nfs3.Sattr{Size: u64(0)})}, "[2]"},
		{"a record in the directory between keeps both", []snfs1.CMLRecord{
			sa(dD, nfs3.Sattr{Mode: u32(0o755)}), mk(snfs1.CMLCreate, dD, "x"), sa(dD, nfs3.Sattr{Mode: u32(0o555)})}, "[1 2 3]"},
		{"a link of the file between keeps both", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Mode: u32(0o600)}), ln(fF, dS, "y"), sa(fF, nfs3.Sattr{Mode: u32(0o640)})}, "[1 2 3]"},
		{"an unlink of a name that may be it keeps both", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Mode: u32(0o600)}), mk(snfs1.CMLUnlink, dD, "f"), sa(fF, nfs3.Sattr{Mode: u32(0o640)})}, "[1 2 3]"},
		{"a file made locally, chmod'ed, touched, chmod'ed again (the mount's log)", []snfs1.CMLRecord{
			mk(snfs1.CMLCreate, dD, "x"), sa(pv(1), nfs3.Sattr{Mode: u32(0o600)}), sa(pv(1), nfs3.Sattr{Mtime: mtime, Atime: mtime}),
			sa(pv(1), nfs3.Sattr{Mode: u32(0o640)})}, "[1 4]"},
		{"a symlink touched and removed costs nothing", []snfs1.CMLRecord{
			mk(snfs1.CMLSymlink, dD, "l"), sa(pv(1), nfs3.Sattr{Mtime: mtime}), sa(pv(1), nfs3.Sattr{Mtime: mtime}), mk(snfs1.CMLUnlink, dD, "l")}, "[]"},
		{"a directory's setattrs collapse", []snfs1.CMLRecord{
			sa(dD, nfs3.Sattr{Mode: u32(0o755)}), sa(dD, nfs3.Sattr{Mtime: mtime}), sa(dD, nfs3.Sattr{Mode: u32(0o750)})}, "[3]"},
		{"a link into the directory between keeps both", []snfs1.CMLRecord{
			sa(dD, nfs3.Sattr{Mode: u32(0o755)}), ln(fF, dD, "h"), sa(dD, nfs3.Sattr{Mode: u32(0o750)})}, "[1 2 3]"},
		{"a link of a server file is kept", []snfs1.CMLRecord{ln(fF, dD, "h")}, "[1]"},
		{"and with an unlink of its new name too (the log does not know the object)", []snfs1.CMLRecord{
			ln(fF, dD, "h"), mk(snfs1.CMLUnlink, dD, "h")}, "[1 2]"},
		{"another object's records between do not", []snfs1.CMLRecord{
			sa(fF, nfs3.Sattr{Mode: u32(0o600)}), mk(snfs1.CMLCreate, dS, "x"), sa(fF, nfs3.Sattr{Mode: u32(0o640)})}, "[2 3]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.recs {
				c.recs[i].LSN = uint64(i + 1)
				if makes(c.recs[i].Op) {
					c.recs[i].New = uint64(i + 1)
				}
			}
			out := Optimize(c.recs)
			var lsns []uint64
			for _, r := range out {
				lsns = append(lsns, r.LSN)
			}
			if got := fmt.Sprint(lsns); got != c.keep {
				t.Fatalf("kept %s, want %s", got, c.keep)
			}
		})
	}
}

// TestOptimizeMergedAttrs: the kept SETATTR carries the fields of those
// merged into it, its own winning.
func TestOptimizeMergedAttrs(t *testing.T) {
	mtime := nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: 7}}
	recs := []snfs1.CMLRecord{
		sa(fF, nfs3.Sattr{Mode: u32(0o600), UID: u32(5)}), sa(fF, nfs3.Sattr{Mtime: mtime}), sa(fF, nfs3.Sattr{Mode: u32(0o640), Size: u64(3)}),
	}
	for i := range recs {
		recs[i].LSN = uint64(i + 1)
	}
	out := Optimize(recs)
	if len(out) != 1 || out[0].LSN != 3 {
		t.Fatalf("%+v", out)
	}
	a := out[0].Attr
	if *a.Mode != 0o640 || *a.UID != 5 || *a.Size != 3 || a.Mtime != mtime || a.GID != nil || a.Atime.How != nfs3.DontChange {
		t.Fatalf("merged %s", fmtLog(out))
	}
	if *recs[0].Attr.Mode != 0o600 || recs[2].Attr.UID != nil {
		t.Fatal("the input changed")
	}
}
