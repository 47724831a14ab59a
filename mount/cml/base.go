package cml

import (
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/xdr"
)

// Bases of the names the log changes (docs/mount.md "A permit lost before
// the log is in"; docs/protocol.md section 21.8). A record made under a
// write-back permit is applied by the server to whatever its names hold
// then; while the permit holds, that is what the mount saw. Once the permit
// is lost before the record is in (revoked: its recall not answered in
// time; or gone with a server restart), others may have changed those
// names. The base of a name is what the server held there before the
// oldest record not yet acknowledged that changes it: the object (its
// handle), or none. The mount compares it with what the server holds
// before it sends such records under a permit asked again, and keeps as
// conflicts only those whose names someone else really changed.
//
// A base is given with the record that first changes its name since the
// name's last record was acknowledged (AppendLazyBased), and written in the
// same frame (kindOpBased): no write or flush of its own, and a replay has
// it whenever it has the record. Each acknowledgement moves the bases of the
// names its records changed to what those records left there (the handle
// a making record's reply gave, none after a removal, the moved object at
// a rename's new name: the server's state before the records still to be
// sent), and drops those of names no record left in the log changes. A
// compaction writes the bases left (kindBase).

// Base is what a name of a directory (named by the server's handle) held
// before the records left in the log that change it.
type Base struct {
	Dir  nfs3.FH
	Name string
	FH   nfs3.FH // nil: no such name
}

// baseKey is the key of dir's name in Log.bases.
func baseKey(dir nfs3.FH, name string) string { return string(dir) + "\x00" + name }

// maxBaseFrame bounds the bases one frame carries (a record gives at
// most two; a compaction's frames at most maxBaseFrame).
const maxBaseFrame = 1024

func encodeBases(w *xdr.Writer, bs []Base) {
	w.Uint32(uint32(len(bs)))
	for _, b := range bs {
		w.Opaque(b.Dir)
		w.String(b.Name)
		w.Opaque(b.FH)
	}
}

func decodeBases(r *xdr.Reader) ([]Base, bool) {
	n := r.Uint32()
	// Each base takes at least 12 bytes (three lengths).
	if r.Err() != nil || n > maxBaseFrame || int(n) > r.Remaining()/12 {
		return nil, false
	}
	out := make([]Base, 0, n)
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		dir := nfs3.DecodeFH(r)
		name := r.String(nfs3.MaxName)
		fh := nfs3.DecodeFH(r)
		if r.Err() != nil {
			return nil, false
		}
		if len(dir) == 0 || name == "" || len(name) > nfs3.MaxName {
			return nil, false
		}
		b := Base{Dir: append(nfs3.FH(nil), dir...), Name: name}
		if len(fh) > 0 {
			b.FH = append(nfs3.FH(nil), fh...)
		}
		out = append(out, b)
	}
	return out, r.Err() == nil
}

// AppendLazyBased is AppendLazy, with the bases of the names rec changes
// (what each held on the server before it, as far as the caller knows: the
// listing it keeps under the directory's permit). Only the bases of names
// that have none in the log yet are kept: a name's base is what it held
// before the first of its records left. They are written in the record's
// own frame.
func (l *Log) AppendLazyBased(rec snfs1.CMLRecord, bases []Base) (uint64, error) {
	return l.appendBased(rec, false, bases)
}

// addBasesLocked keeps those of bs whose names have no base yet and
// returns them (mu held).
func (l *Log) addBasesLocked(bs []Base) []Base {
	var out []Base
	for _, b := range bs {
		k := baseKey(b.Dir, b.Name)
		if _, ok := l.bases[k]; ok {
			continue
		}
		if l.bases == nil {
			l.bases = map[string]Base{}
		}
		c := Base{Dir: append(nfs3.FH(nil), b.Dir...), Name: b.Name}
		if b.FH != nil {
			c.FH = append(nfs3.FH(nil), b.FH...)
		}
		l.bases[k] = c
		out = append(out, c)
	}
	return out
}

// cloneBases copies bs (the caller's slices are not kept).
func cloneBases(bs []Base) []Base {
	out := make([]Base, len(bs))
	for k, b := range bs {
		out[k] = Base{Dir: append(nfs3.FH(nil), b.Dir...), Name: b.Name}
		if b.FH != nil {
			out[k].FH = append(nfs3.FH(nil), b.FH...)
		}
	}
	return out
}

// BaseOf returns the base of name in dir (false: none kept: the name was
// changed by no record left, or by records logged without one).
func (l *Log) BaseOf(dir nfs3.FH, name string) (Base, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bases[baseKey(dir, name)]
	return b, ok
}

// moveBasesLocked moves the bases of the names recs (acknowledged, in
// order) changed to what they left there, then drops the bases of names
// no record left in the log changes (mu held; the provisional ids' handles
// the acknowledgement gave are in handles already).
func (l *Log) moveBasesLocked(recs []snfs1.CMLRecord) {
	if len(recs) == 0 {
		return
	}
	if l.bases == nil {
		l.bases = map[string]Base{}
	}
	dirOf := func(o snfs1.ObjRef) nfs3.FH {
		if o.Prov != 0 {
			return l.handles[o.Prov] // nil: not made (yet): not on the server
		}
		return o.FH
	}
	set := func(o snfs1.ObjRef, name string, fh nfs3.FH, known bool) {
		dir := dirOf(o)
		if dir == nil {
			return
		}
		k := baseKey(dir, name)
		if !known {
			delete(l.bases, k)
			return
		}
		l.bases[k] = Base{Dir: dir, Name: name, FH: fh}
	}
	for i := range recs {
		r := &recs[i]
		switch r.Op {
		case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
			fh, ok := l.handles[r.New]
			set(r.Dir, r.Name, fh, ok)
		case snfs1.CMLLink:
			fh := r.Obj.FH
			if r.Obj.Prov != 0 {
				fh = l.handles[r.Obj.Prov]
			}
			set(r.Dir, r.Name, fh, fh != nil)
		case snfs1.CMLUnlink, snfs1.CMLRmdir:
			set(r.Dir, r.Name, nil, true)
		case snfs1.CMLRename:
			var moved Base
			ok := false
			if dir := dirOf(r.Dir); dir != nil {
				moved, ok = l.bases[baseKey(dir, r.Name)]
			}
			set(r.ToDir, r.ToName, moved.FH, ok && moved.FH != nil)
			set(r.Dir, r.Name, nil, true)
		}
	}
	l.pruneBasesLocked()
}

// pruneBasesLocked drops the bases of names no record left changes (mu
// held).
func (l *Log) pruneBasesLocked() {
	if len(l.bases) == 0 {
		return
	}
	if len(l.plan) == 0 && len(l.pending) == 0 {
		clear(l.bases)
		return
	}
	used := map[string]bool{}
	note := func(r *snfs1.CMLRecord) {
		for _, n := range nameRefs(r) {
			dir := n.dir.FH
			if n.dir.Prov != 0 {
				dir = l.handles[n.dir.Prov]
			}
			if dir != nil {
				used[baseKey(dir, n.name)] = true
			}
		}
	}
	for i := range l.plan {
		note(&l.plan[i])
	}
	for i := range l.pending {
		note(&l.pending[i].rec)
	}
	for k := range l.bases {
		if !used[k] {
			delete(l.bases, k)
		}
	}
}

// nameRef is a name of a directory a record changes.
type nameRef struct {
	dir  snfs1.ObjRef
	name string
}

// nameRefs returns the names rec changes.
func nameRefs(rec *snfs1.CMLRecord) []nameRef {
	switch rec.Op {
	case snfs1.CMLRename:
		return []nameRef{{rec.Dir, rec.Name}, {rec.ToDir, rec.ToName}}
	case snfs1.CMLSetattr, snfs1.CMLStore:
		return nil
	}
	return []nameRef{{rec.Dir, rec.Name}}
}

// NameChanged is a name a record left in the log changes.
type NameChanged struct {
	Dir  nfs3.FH
	Name string
	// Made: a record left names the directory by provisional id: the log
	// made it, so the name held nothing before this log's records.
	Made bool
}

// NamesChanged returns the names (by directory handle) the records left in
// the log change in the directories dirs: what a mount whose permits of
// dirs were lost checks before it sends them. Names in directories still
// named by provisional id and not made on the server yet are left out.
func (l *Log) NamesChanged(dirs []nfs3.FH) []NameChanged {
	want := map[string]bool{}
	for _, d := range dirs {
		want[string(d)] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]int{}
	var out []NameChanged
	note := func(r *snfs1.CMLRecord) {
		for _, n := range nameRefs(r) {
			dir := n.dir.FH
			if n.dir.Prov != 0 {
				dir = l.handles[n.dir.Prov]
			}
			if dir == nil || !want[string(dir)] {
				continue
			}
			k := baseKey(dir, n.name)
			if i, ok := seen[k]; ok {
				out[i].Made = out[i].Made || n.dir.Prov != 0
				continue
			}
			seen[k] = len(out)
			out = append(out, NameChanged{Dir: append(nfs3.FH(nil), dir...), Name: n.name, Made: n.dir.Prov != 0})
		}
	}
	for i := range l.plan {
		note(&l.plan[i])
	}
	for i := range l.pending {
		note(&l.pending[i].rec)
	}
	return out
}

// MaySent reports whether records of the plan may have been applied by the
// server without the log knowing (a batch whose reply was not recorded:
// the call failed, or the mount was killed): their names' bases are then
// those before them, and the server may hold what they left. A resend
// tells which were (the server answers them by LSN).
func (l *Log) MaySent() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.plan) > 0 && l.maySent >= l.plan[0].LSN
}
