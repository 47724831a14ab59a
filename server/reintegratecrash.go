package server

import (
	"encoding/binary"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// What of a REINTEGRATE batch a crash interrupted was applied
// (docs/protocol.md section 21.3, "A crash in the middle of a batch"). Before
// a batch's first record is applied, its highest LSN is committed as pending
// with the batch's pre-image: for each name its records change, the object
// the name held (or none). The batch was applied in order, so what was
// applied is a prefix of it; at the resend, the prefix is the longest one
// whose applying to the pre-image gives the names as they are now - an
// object made by a record is one none of the names held before. Objects,
// not names: a batch that removes a name and makes it again (RENAME a to b,
// CREATE a) is told apart from one not applied at all by the object at a.
// When no prefix gives the names as they are (someone else changed one of
// them meanwhile, or a pre-image from before this check existed), the
// records are checked from the last one back for their effect, and the
// first found applied ends the prefix.

// preKey is the pre-image key of the name name in the directory o names
// (by its handle's FileID, or by its provisional id: a directory the batch
// makes had no names before it).
func preKey(o snfs1.ObjRef, name string) uint64 {
	var dir state.FileID
	if o.Prov != 0 {
		copy(dir[:], "prov")
		binary.BigEndian.PutUint64(dir[8:], o.Prov)
	} else {
		dir = state.FileIDOf(o.FH)
	}
	return consist.PreKey(dir, name)
}

// preName is a name a record changes, and what it holds after the record.
type preName struct {
	dir  snfs1.ObjRef
	name string
	// after: 'a' absent; 'n' a new object (made by the record); 'o' an
	// object named before (a LINK's file, a RENAME's source's).
	after byte
	obj   snfs1.ObjRef // 'o' of a LINK: the file
}

// names returns the names record rec changes.
func recNames(rec *snfs1.CMLRecord) []preName {
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		return []preName{{dir: rec.Dir, name: rec.Name, after: 'n'}}
	case snfs1.CMLLink:
		return []preName{{dir: rec.Dir, name: rec.Name, after: 'o', obj: rec.Obj}}
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		return []preName{{dir: rec.Dir, name: rec.Name, after: 'a'}}
	case snfs1.CMLRename:
		return []preName{{dir: rec.Dir, name: rec.Name, after: 'a'}, {dir: rec.ToDir, name: rec.ToName, after: 'o'}}
	}
	return nil
}

// current returns the object the name n of record i's check names now
// (zero: none).
func (b *batch) current(n preName, i int) state.FileID {
	fh := b.crashRef(n.dir, i)
	if fh == nil {
		return state.FileID{}
	}
	r, err := b.s.resolve(b.c, fh)
	if err != nil {
		return state.FileID{}
	}
	defer r.release()
	if obj := b.s.handleIn(r, n.name); obj != nil {
		return state.FileIDOf(obj)
	}
	return state.FileID{}
}

// preImage returns the objects the names of the records after LSN from hold
// now.
func (b *batch) preImage(from uint64) map[uint64]state.FileID {
	pre := map[uint64]state.FileID{}
	for i := range b.recs {
		rec := &b.recs[i]
		if rec.LSN <= from {
			continue
		}
		for _, n := range recNames(rec) {
			k := preKey(n.dir, n.name)
			if _, ok := pre[k]; ok {
				continue
			}
			if b.madeAfter(n.dir, from) {
				pre[k] = state.FileID{} // a directory not made yet has no names
				continue
			}
			pre[k] = b.current(n, i)
		}
	}
	return pre
}

// madeAfter reports whether o is a provisional id whose making record's LSN
// is above from.
func (b *batch) madeAfter(o snfs1.ObjRef, from uint64) bool {
	if o.Prov == 0 {
		return false
	}
	for i := range b.recs {
		m := &b.recs[i]
		switch m.Op {
		case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
			if m.New == o.Prov {
				return m.LSN > from
			}
		}
	}
	return false
}

// predicted is what a name holds in the check: an object of the pre-image
// (obj), none (zero obj, made 0), or the object made by the record made-1.
type predicted struct {
	obj  state.FileID
	made int
}

// crashPrefix returns the LSN up to which the batch interrupted by a crash
// (its records after last up to maybe may have been applied) was applied.
func (b *batch) crashPrefix(pre map[uint64]state.FileID) uint64 {
	if lsn, ok := b.crashPrefixByObjects(pre); ok {
		return lsn
	}
	for i := len(b.recs) - 1; i >= 0; i-- {
		rec := &b.recs[i]
		if rec.LSN <= b.last || rec.LSN > b.maybe {
			continue
		}
		if b.present(i) {
			return rec.LSN
		}
	}
	return b.last
}

// crashPrefixByObjects finds the longest prefix of the records in the
// crash's range whose applying to the pre-image gives the names as they are
// now; ok false when none does, or the pre-image lacks a name.
func (b *batch) crashPrefixByObjects(pre map[uint64]state.FileID) (uint64, bool) {
	if pre == nil {
		return 0, false
	}
	state0 := map[uint64]predicted{}
	now := map[uint64]state.FileID{}
	old := map[state.FileID]bool{}
	for _, id := range pre {
		old[id] = true
	}
	first, end := -1, -1
	for i := range b.recs {
		rec := &b.recs[i]
		if rec.LSN <= b.last || rec.LSN > b.maybe {
			continue
		}
		if first < 0 {
			first = i
		}
		end = i + 1
		for _, n := range recNames(rec) {
			k := preKey(n.dir, n.name)
			if _, ok := state0[k]; ok {
				continue
			}
			id, ok := pre[k]
			if !ok {
				return 0, false
			}
			state0[k] = predicted{obj: id}
			now[k] = b.current(n, i)
		}
	}
	if first < 0 {
		return b.last, true
	}
	// matches reports whether the names predicted hold what they hold now:
	// an object made by a record must be one no name held before, the same
	// one wherever that record's object is predicted.
	matches := func(st map[uint64]predicted) bool {
		made := map[int]state.FileID{}
		for k, p := range st {
			cur := now[k]
			switch {
			case p.made == 0:
				if cur != p.obj {
					return false
				}
			case cur == (state.FileID{}) || old[cur]:
				return false
			default:
				if m, ok := made[p.made]; ok && m != cur {
					return false
				}
				made[p.made] = cur
			}
		}
		return true
	}
	st := make(map[uint64]predicted, len(state0))
	for k, v := range state0 {
		st[k] = v
	}
	best, found := uint64(0), false
	if matches(st) {
		best, found = b.last, true
	}
	for i := first; i < end; i++ {
		rec := &b.recs[i]
		if !possible(rec, st) {
			break // it would have failed: the batch stopped there, no longer prefix was applied
		}
		if rec.Op == snfs1.CMLRename {
			from, to := preKey(rec.Dir, rec.Name), preKey(rec.ToDir, rec.ToName)
			if from != to {
				st[to], st[from] = st[from], predicted{}
			}
		} else {
			for _, n := range recNames(rec) {
				k := preKey(n.dir, n.name)
				switch n.after {
				case 'a':
					st[k] = predicted{}
				case 'n':
					st[k] = predicted{made: i + 1}
				case 'o':
					st[k] = b.linked(n.obj, st)
				}
			}
		}
		if matches(st) {
			best, found = rec.LSN, true
		}
	}
	return best, found
}

// possible reports whether rec could have been applied on the names as st
// predicts them: a name made must be free, a name removed or moved there.
func possible(rec *snfs1.CMLRecord, st map[uint64]predicted) bool {
	there := st[preKey(rec.Dir, rec.Name)] != (predicted{})
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink, snfs1.CMLLink:
		return !there
	case snfs1.CMLUnlink, snfs1.CMLRmdir, snfs1.CMLRename:
		return there
	}
	return true
}

// linked is what a LINK's file is in the check: an object made by the
// batch if a name predicted holds it, else the file's own.
func (b *batch) linked(o snfs1.ObjRef, st map[uint64]predicted) predicted {
	if o.Prov != 0 {
		for i := range b.recs {
			m := &b.recs[i]
			switch m.Op {
			case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
				if m.New == o.Prov {
					return predicted{made: i + 1}
				}
			}
		}
		return predicted{}
	}
	return predicted{obj: state.FileIDOf(o.FH)}
}

// present reports whether record i's effect is there.
func (b *batch) present(i int) bool {
	rec := &b.recs[i]
	in := func(o snfs1.ObjRef, name string) bool {
		fh := b.crashRef(o, i)
		if fh == nil {
			return false
		}
		r, err := b.s.resolve(b.c, fh)
		if err != nil {
			return false
		}
		defer r.release()
		return b.s.handleIn(r, name) != nil
	}
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink, snfs1.CMLLink:
		return in(rec.Dir, rec.Name)
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		return !in(rec.Dir, rec.Name)
	case snfs1.CMLRename:
		return !in(rec.Dir, rec.Name) && in(rec.ToDir, rec.ToName)
	}
	return false
}

// crashRef resolves, for the check of record i, an object reference: a
// provisional id by the name the record before i that made it gave it
// (nil: unknown, or the name is gone).
func (b *batch) crashRef(o snfs1.ObjRef, i int) nfs3.FH {
	if o.Prov == 0 {
		return o.FH
	}
	for j := i - 1; j >= 0; j-- {
		m := &b.recs[j]
		switch m.Op {
		case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		default:
			continue
		}
		if m.New != o.Prov {
			continue
		}
		dfh := b.crashRef(m.Dir, j)
		if dfh == nil {
			return nil
		}
		r, err := b.s.resolve(b.c, dfh)
		if err != nil {
			return nil
		}
		defer r.release()
		return b.s.handleIn(r, m.Name)
	}
	return nil
}
