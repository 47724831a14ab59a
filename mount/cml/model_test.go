package cml

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/xdr"
)

// An in-memory server tree that applies log records as REINTEGRATE does
// (each as its NFSv3 procedure, refused as the server refuses it), for the
// optimiser's model test: the optimised log applied to the tree must
// succeed record by record and end in the tree the raw log ends in.

type mobj struct {
	id      int
	kind    byte // 'f' file, 'd' directory, 'l' symbolic link
	target  string
	mode    uint32
	uid     uint32
	size    uint64
	mtime   string
	atime   string
	nlink   int
	entries map[string]*mobj // a directory's
	parent  *mobj            // a directory's
	fh      nfs3.FH          // an object of the initial tree
}

type mtree struct {
	root   *mobj
	byFH   map[string]*mobj
	byProv map[uint64]*mobj
	n      int
}

var errModel = errors.New("refused")

// newTree is the server's tree before the log: R holding directories s1
// (with file g and an empty directory e) and s2, and files f1, f2 (f2 also
// linked as s2/h).
func newTree() *mtree {
	t := &mtree{byFH: map[string]*mobj{}, byProv: map[uint64]*mobj{}}
	t.root = t.add(nil, "", 'd', "R")
	s1 := t.add(t.root, "s1", 'd', "S1")
	t.add(s1, "g", 'f', "G")
	t.add(s1, "e", 'd', "E")
	s2 := t.add(t.root, "s2", 'd', "S2")
	t.add(t.root, "f1", 'f', "F1")
	f2 := t.add(t.root, "f2", 'f', "F2")
	s2.entries["h"] = f2
	f2.nlink++
	return t
}

func (t *mtree) add(dir *mobj, name string, kind byte, fh string) *mobj {
	t.n++
	o := &mobj{id: t.n, kind: kind, mode: 0o644, nlink: 1, fh: nfs3.FH(fh), mtime: "0", atime: "0"}
	if kind == 'd' {
		o.entries, o.parent = map[string]*mobj{}, dir
	}
	if dir != nil {
		dir.entries[name] = o
	}
	t.byFH[fh] = o
	return o
}

func (t *mtree) resolve(r snfs1.ObjRef) (*mobj, error) {
	var o *mobj
	if r.Prov != 0 {
		o = t.byProv[r.Prov]
	} else {
		o = t.byFH[string(r.FH)]
	}
	if o == nil || o.nlink <= 0 {
		return nil, fmt.Errorf("%w: no object %d/%q", errModel, r.Prov, r.FH)
	}
	return o, nil
}

// dir resolves a directory whose entries a record changes: the caller is
// its owner, and the server refuses the change unless the owner may write
// it (so a SETATTR of a directory's mode matters to the records after it).
func (t *mtree) dir(r snfs1.ObjRef) (*mobj, error) {
	d, err := t.resolve(r)
	if err == nil && d.kind != 'd' {
		err = fmt.Errorf("%w: not a directory", errModel)
	}
	if err == nil && d.mode&0o200 == 0 {
		err = fmt.Errorf("%w: directory not writable", errModel)
	}
	return d, err
}

func setAttr(o *mobj, a nfs3.Sattr, server int) error {
	if a.Size != nil && o.kind != 'f' {
		return fmt.Errorf("%w: size of a non-file", errModel)
	}
	if a.Mode != nil {
		o.mode = *a.Mode
	}
	if a.UID != nil {
		o.uid = *a.UID
	}
	if a.Size != nil {
		o.size = *a.Size
	}
	for _, x := range []struct {
		st *nfs3.SetTime
		v  *string
	}{{&a.Atime, &o.atime}, {&a.Mtime, &o.mtime}} {
		switch x.st.How {
		case nfs3.SetToServerTime:
			*x.v = "server"
		case nfs3.SetToClientTime:
			*x.v = fmt.Sprint(x.st.Time.Sec)
		}
	}
	return nil
}

// apply applies rec, or refuses it and changes nothing.
func (t *mtree) apply(rec *snfs1.CMLRecord) error {
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		d, err := t.dir(rec.Dir)
		if err != nil {
			return err
		}
		if d.entries[rec.Name] != nil {
			return fmt.Errorf("%w: %s exists", errModel, rec.Name)
		}
		kind := map[snfs1.CMLOp]byte{snfs1.CMLCreate: 'f', snfs1.CMLMkdir: 'd', snfs1.CMLSymlink: 'l'}[rec.Op]
		t.n++
		o := &mobj{id: t.n, kind: kind, target: rec.Target, mode: 0o644, nlink: 1, mtime: "0", atime: "0"}
		if kind == 'd' {
			o.entries, o.parent = map[string]*mobj{}, d
		}
		if err := setAttr(o, rec.Attr, 0); err != nil {
			return err
		}
		d.entries[rec.Name] = o
		if rec.New != 0 {
			t.byProv[rec.New] = o
		}
	case snfs1.CMLLink:
		o, err := t.resolve(rec.Obj)
		if err != nil {
			return err
		}
		d, err := t.dir(rec.Dir)
		if err != nil {
			return err
		}
		if o.kind == 'd' || d.entries[rec.Name] != nil {
			return fmt.Errorf("%w: link", errModel)
		}
		d.entries[rec.Name] = o
		o.nlink++
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		d, err := t.dir(rec.Dir)
		if err != nil {
			return err
		}
		o := d.entries[rec.Name]
		if o == nil || (o.kind == 'd') != (rec.Op == snfs1.CMLRmdir) || (o.kind == 'd' && len(o.entries) > 0) {
			return fmt.Errorf("%w: remove %s", errModel, rec.Name)
		}
		delete(d.entries, rec.Name)
		o.nlink--
	case snfs1.CMLRename:
		from, err := t.dir(rec.Dir)
		if err != nil {
			return err
		}
		to, err := t.dir(rec.ToDir)
		if err != nil {
			return err
		}
		o := from.entries[rec.Name]
		if o == nil {
			return fmt.Errorf("%w: rename of a missing name", errModel)
		}
		if o.kind == 'd' {
			for p := to; p != nil; p = p.parent {
				if p == o {
					return fmt.Errorf("%w: rename into itself", errModel)
				}
			}
		}
		x := to.entries[rec.ToName]
		if x == o {
			return nil // POSIX: the same object, nothing happens
		}
		if x != nil {
			if (x.kind == 'd') != (o.kind == 'd') || (x.kind == 'd' && len(x.entries) > 0) {
				return fmt.Errorf("%w: rename over %s", errModel, rec.ToName)
			}
			x.nlink--
		}
		delete(from.entries, rec.Name)
		to.entries[rec.ToName] = o
		if o.kind == 'd' {
			o.parent = to
		}
	case snfs1.CMLSetattr:
		o, err := t.resolve(rec.Obj)
		if err != nil {
			return err
		}
		saved := *o
		if err := setAttr(o, rec.Attr, 0); err != nil {
			*o = saved
			return err
		}
	}
	return nil
}

// dump is the tree as text: every path with its object's kind, attributes
// and link group (its first path), so two trees compare as text.
func (t *mtree) dump() string {
	type line struct{ path, desc string }
	var lines []line
	first := map[*mobj]string{}
	var walk func(d *mobj, path string)
	var paths []struct {
		p string
		o *mobj
	}
	walk = func(d *mobj, path string) {
		names := make([]string, 0, len(d.entries))
		for n := range d.entries {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o := d.entries[n]
			p := path + "/" + n
			paths = append(paths, struct {
				p string
				o *mobj
			}{p, o})
			if o.kind == 'd' {
				walk(o, p)
			}
		}
	}
	walk(t.root, "")
	for _, x := range paths {
		if _, ok := first[x.o]; !ok {
			first[x.o] = x.p
		}
	}
	for _, x := range paths {
		o := x.o
		lines = append(lines, line{x.p, fmt.Sprintf("%c %o uid=%d size=%d m=%s a=%s ->%s same=%s fh=%q",
			o.kind, o.mode, o.uid, o.size, o.mtime, o.atime, o.target, first[o], o.fh)})
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %s\n", l.path, l.desc)
	}
	return b.String()
}

// genLog makes a random valid log of about n records against newTree:
// each candidate record is applied to a model and kept only if it succeeds
// (the mount logs what it did locally). Names come from a small set, so
// that records meet.
func genLog(rng *rand.Rand, n int) []snfs1.CMLRecord {
	t := newTree()
	names := []string{"a", "b", "c", "d", "f1", "f2", "g", "h", "e", "s1"}
	provOf := map[*mobj]uint64{}
	ref := func(o *mobj) snfs1.ObjRef {
		if o.fh != nil {
			return snfs1.ObjRef{FH: o.fh}
		}
		if p, ok := provOf[o]; ok {
			return snfs1.ObjRef{Prov: p}
		}
		panic("an object with no reference")
	}
	var out []snfs1.CMLRecord
	lsn := uint64(100)
	var dirs, all []*mobj // the live objects, in a stable order
	stale := true
	for tries := 0; len(out) < n && tries < 20*n; tries++ {
		var walk func(d *mobj)
		seen := map[*mobj]bool{}
		walk = func(d *mobj) {
			dirs = append(dirs, d)
			ks := make([]string, 0, len(d.entries))
			for k := range d.entries {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				o := d.entries[k]
				if !seen[o] {
					seen[o] = true
					all = append(all, o)
				}
				if o.kind == 'd' {
					walk(o)
				}
			}
		}
		if stale {
			dirs, all, stale = dirs[:0], all[:0], false
			walk(t.root)
		}
		pick := func(s []*mobj) *mobj { return s[rng.IntN(len(s))] }
		name := names[rng.IntN(len(names))]
		rec := snfs1.CMLRecord{LSN: lsn + 1}
		switch k := rng.IntN(20); {
		case k < 5:
			rec.Op, rec.Dir, rec.Name = snfs1.CMLCreate, ref(pick(dirs)), name
			if rng.IntN(3) == 0 {
				m := uint32(rng.IntN(8)) << 6
				rec.Attr.Mode = &m
			}
		case k < 7:
			rec.Op, rec.Dir, rec.Name = snfs1.CMLMkdir, ref(pick(dirs)), name
		case k < 8:
			rec.Op, rec.Dir, rec.Name, rec.Target = snfs1.CMLSymlink, ref(pick(dirs)), name, "t"+name
		case k < 10:
			if len(all) == 0 {
				continue
			}
			rec.Op, rec.Obj, rec.Dir, rec.Name = snfs1.CMLLink, ref(pick(all)), ref(pick(dirs)), name
		case k < 13:
			rec.Op, rec.Dir, rec.Name = snfs1.CMLUnlink, ref(pick(dirs)), name
			if rng.IntN(3) == 0 {
				rec.Op = snfs1.CMLRmdir
			}
		case k < 16:
			rec.Op, rec.Dir, rec.Name, rec.ToDir, rec.ToName = snfs1.CMLRename, ref(pick(dirs)), name, ref(pick(dirs)), names[rng.IntN(len(names))]
		default:
			if len(all) == 0 {
				continue
			}
			rec.Op, rec.Obj = snfs1.CMLSetattr, ref(pick(all))
			if rng.IntN(4) == 0 {
				rec.Obj = ref(pick(dirs))
			}
			switch rng.IntN(5) {
			case 0:
				m := uint32(rng.IntN(8))<<3 | uint32(rng.IntN(8))<<6
				rec.Attr.Mode = &m
			case 1:
				s := uint64(rng.IntN(4))
				rec.Attr.Size = &s
			case 2:
				rec.Attr.Mtime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: uint32(rng.IntN(1000))}}
			case 3:
				rec.Attr.Atime = nfs3.SetTime{How: nfs3.SetToServerTime}
				u := uint32(rng.IntN(3))
				rec.Attr.UID = &u
			default:
				m := uint32(rng.IntN(8))
				rec.Attr.Mode = &m
				rec.Attr.Mtime = nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Sec: uint32(rng.IntN(1000))}}
			}
		}
		if makes(rec.Op) {
			rec.New = rec.LSN
		}
		if t.apply(&rec) != nil {
			continue
		}
		lsn++
		stale = true
		if rec.New != 0 {
			provOf[t.byProv[rec.New]] = rec.New
		}
		out = append(out, rec)
	}
	return out
}

// checkOptimized applies raw and its optimisation to fresh trees and
// compares them; it returns the counts optimize reported.
func checkOptimized(t *testing.T, what string, raw []snfs1.CMLRecord) (cancelled, merged int) {
	t.Helper()
	in := slices.Clone(raw)
	opt, cancelled, merged := optimize(raw)
	if !slices.EqualFunc(in, raw, func(a, b snfs1.CMLRecord) bool { return bytes.Equal(encodeRec(&a), encodeRec(&b)) }) {
		t.Fatalf("%s: optimize changed its input", what)
	}
	if len(opt)+cancelled+merged != len(raw) {
		t.Fatalf("%s: %d records in, %d out, %d cancelled, %d merged", what, len(raw), len(opt), cancelled, merged)
	}
	// A subsequence: LSNs increase and each names a raw record of the same op.
	byLSN := map[uint64]snfs1.CMLRecord{}
	for _, r := range raw {
		byLSN[r.LSN] = r
	}
	for i, r := range opt {
		if i > 0 && r.LSN <= opt[i-1].LSN {
			t.Fatalf("%s: reordered at %d", what, i)
		}
		if o, ok := byLSN[r.LSN]; !ok || o.Op != r.Op {
			t.Fatalf("%s: record %d is no raw record", what, r.LSN)
		}
	}
	a, b := newTree(), newTree()
	for i := range raw {
		if err := a.apply(&raw[i]); err != nil {
			t.Fatalf("%s: the raw log fails at %d: %v", what, raw[i].LSN, err)
		}
	}
	for i := range opt {
		if err := b.apply(&opt[i]); err != nil {
			t.Fatalf("%s: the optimised log fails at LSN %d (%s): %v\nraw:\n%s\noptimised:\n%s", what, opt[i].LSN, opt[i].Op, err, fmtLog(raw), fmtLog(opt))
		}
	}
	if da, db := a.dump(), b.dump(); da != db {
		t.Fatalf("%s: trees differ\nraw log:\n%s\noptimised:\n%s\nraw tree:\n%s\noptimised tree:\n%s", what, fmtLog(raw), fmtLog(opt), da, db)
	}
	return cancelled, merged
}

func encodeRec(r *snfs1.CMLRecord) []byte {
	w := xdr.NewWriter(nil)
	r.Encode(w)
	return w.Bytes()
}

func fmtRef(o snfs1.ObjRef) string {
	if o.Prov != 0 {
		return fmt.Sprintf("p%d", o.Prov)
	}
	return string(o.FH)
}

func fmtLog(recs []snfs1.CMLRecord) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "  %d %s", r.LSN, r.Op)
		switch r.Op {
		case snfs1.CMLSetattr:
			fmt.Fprintf(&b, " %s mode=%v size=%v mtime=%v", fmtRef(r.Obj), ptr(r.Attr.Mode), ptr(r.Attr.Size), r.Attr.Mtime)
		case snfs1.CMLLink:
			fmt.Fprintf(&b, " %s -> %s/%s", fmtRef(r.Obj), fmtRef(r.Dir), r.Name)
		case snfs1.CMLRename:
			fmt.Fprintf(&b, " %s/%s -> %s/%s", fmtRef(r.Dir), r.Name, fmtRef(r.ToDir), r.ToName)
		default:
			fmt.Fprintf(&b, " %s/%s", fmtRef(r.Dir), r.Name)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func ptr[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}

// TestOptimizeModel: for 1,000 seeded random logs of 1 to 120 records, the
// optimised log applies record by record to the server's tree and ends in
// the tree the raw log ends in; across them, both rules fire.
func TestOptimizeModel(t *testing.T) {
	var recs, cancelled, merged int
	for seed := uint64(1); seed <= 1000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 26))
		raw := genLog(rng, 1+rng.IntN(120))
		c, m := checkOptimized(t, fmt.Sprintf("seed %d", seed), raw)
		recs, cancelled, merged = recs+len(raw), cancelled+c, merged+m
	}
	t.Logf("%d records: %d cancelled, %d setattrs merged", recs, cancelled, merged)
	if cancelled < recs/20 || merged == 0 {
		t.Fatalf("the random logs hardly exercise the optimiser: %d of %d cancelled, %d merged", cancelled, recs, merged)
	}
}

// FuzzOptimize is TestOptimizeModel with the seed and length fuzzed.
func FuzzOptimize(f *testing.F) {
	f.Add(uint64(1), uint8(40))
	f.Add(uint64(77), uint8(200))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		rng := rand.New(rand.NewPCG(seed, 26))
		checkOptimized(t, fmt.Sprintf("seed %d n %d", seed, n), genLog(rng, int(n)))
	})
}
