package cml

import (
	"encoding/binary"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Optimize returns the records to send for recs: raw records in increasing
// LSN order, each of which succeeded, in that order, when the client made
// it locally (so recs is a valid history from the server's tree). It is
// pure, and the server's tree that results from applying its output is the
// one that results from applying recs (the model test checks this on random
// logs). The rules (Coda's log optimisations, made safe for a log that
// does not know the server's tree):
//
//  1. An object the log made (CREATE, MKDIR, SYMLINK) that has no name
//     left at the end of recs costs nothing: its making record, and every
//     record whose subject it is (its SETATTRs, LINKs, the RENAMEs of its
//     names, the UNLINK or RMDIR that removed its last name), are dropped.
//     A LINK of it to a name that survives keeps it alive (it still has a
//     name). Two exceptions keep it: a RENAME of one of its names over a
//     name that was (or may have been: the log does not know the server's
//     names, except those of a directory it made, empty when made) present,
//     since dropping that RENAME would leave the replaced object in place,
//     unless the replaced object is one the log made that is dropped too
//     (the name is then absent on the server as well); and, for a
//     directory, any record in it whose subject survives (a file made in it and moved out, a server object moved
//     through it). So an MKDIR and RMDIR of a new directory that was empty
//     at the end cancel, with whatever lived and died inside it.
//  2. A SETATTR merges into the next SETATTR of the same object when no
//     record between them refers to the object (by handle, provisional id,
//     as a directory, or by a name that names it or may name it): the later
//     one, at its own place and LSN, carries both (its fields win). An
//     earlier SETATTR that sets a size is never merged: data writes go to
//     the server outside the log, and a truncation moved past them would
//     cut what they wrote.
//
// It never reorders: the output is a subsequence of recs, with merged
// attributes in the kept SETATTRs.
func Optimize(recs []snfs1.CMLRecord) []snfs1.CMLRecord {
	out, _, _ := optimize(recs)
	return out
}

// Name map values besides an object index.
const (
	nameAbsent  = -1 // known to name nothing
	namePresent = -2 // names something the log did not make
	nameUnknown = -3 // not in the map: the server's, unknown to the log
)

type optObj struct {
	links  int   // names it has, as the log sees them
	pinned bool  // a record of it replaced a name that was or may have been present
	inside []int // records that use it as a directory
	over   []int // objects the log made that a RENAME of it replaced
	dir    bool  // made by MKDIR: empty when made
}

type optimizer struct {
	recs    []snfs1.CMLRecord
	objs    []optObj
	made    map[uint64]int // provisional id -> object
	names   map[string]int // directory key + name -> object, nameAbsent or namePresent; missing: unknown
	subject []int          // record -> the log object it is about, or -1
}

// refKey names an object reference: provisional ids and handles apart.
func refKey(o snfs1.ObjRef) string {
	if o.Prov != 0 {
		return "p" + string(binary.BigEndian.AppendUint64(nil, o.Prov))
	}
	return "h" + string(o.FH)
}

func nameKey(dir snfs1.ObjRef, name string) string { return refKey(dir) + "/" + name }

func (z *optimizer) objOf(o snfs1.ObjRef) int {
	if o.Prov != 0 {
		if id, ok := z.made[o.Prov]; ok {
			return id
		}
	}
	return -1
}

// name is what the name k of dir holds, as the log knows it: the map's,
// or, not in it, absent in a directory the log made (empty when made:
// every name it has since is the log's doing), else not known.
func (z *optimizer) name(dir snfs1.ObjRef, k string) (int, bool) {
	if v, ok := z.names[k]; ok {
		return v, true
	}
	if d := z.objOf(dir); d >= 0 && z.objs[d].dir {
		return nameAbsent, true
	}
	return 0, false
}

func (z *optimizer) inside(o snfs1.ObjRef, i int) {
	if d := z.objOf(o); d >= 0 {
		z.objs[d].inside = append(z.objs[d].inside, i)
	}
}

// optimize is Optimize, also counting the records cancelled (rule 1) and
// merged (rule 2).
func optimize(recs []snfs1.CMLRecord) (out []snfs1.CMLRecord, cancelled, merged int) {
	z := &optimizer{recs: recs, made: map[uint64]int{}, names: map[string]int{}, subject: make([]int, len(recs))}
	for i := range recs {
		z.subject[i] = -1
		z.walk(i)
	}
	// Rule 1: the dead, unpinned objects, less the directories something
	// surviving needs, to a fixpoint.
	dead := make([]bool, len(z.objs))
	for o := range z.objs {
		dead[o] = z.objs[o].links <= 0 && !z.objs[o].pinned
	}
	for changed := true; changed; {
		changed = false
		for o := range z.objs {
			if !dead[o] {
				continue
			}
			for _, i := range z.objs[o].inside {
				if s := z.subject[i]; s < 0 || !dead[s] {
					dead[o], changed = false, true
					break
				}
			}
			for _, r := range z.objs[o].over {
				if dead[o] && !dead[r] {
					dead[o], changed = false, true
				}
			}
		}
	}
	keep := make([]bool, len(recs))
	for i := range recs {
		keep[i] = z.subject[i] < 0 || !dead[z.subject[i]]
		if !keep[i] {
			cancelled++
		}
	}
	merged = z.mergeSetattrs(keep)
	for i := range z.recs {
		if keep[i] {
			out = append(out, z.recs[i])
		}
	}
	return out, cancelled, merged
}

// walk follows record i's effect on the names the log knows.
func (z *optimizer) walk(i int) {
	r := &z.recs[i]
	switch r.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		z.inside(r.Dir, i)
		o := len(z.objs)
		z.objs = append(z.objs, optObj{links: 1, dir: r.Op == snfs1.CMLMkdir})
		if r.New != 0 {
			z.made[r.New] = o
		}
		z.names[nameKey(r.Dir, r.Name)] = o
		z.subject[i] = o
	case snfs1.CMLLink:
		z.inside(r.Dir, i)
		s := z.objOf(r.Obj)
		z.subject[i] = s
		if s >= 0 {
			z.objs[s].links++
			z.names[nameKey(r.Dir, r.Name)] = s
		} else {
			z.names[nameKey(r.Dir, r.Name)] = namePresent
		}
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		z.inside(r.Dir, i)
		k := nameKey(r.Dir, r.Name)
		if v, ok := z.names[k]; ok && v >= 0 {
			z.subject[i] = v
			z.objs[v].links--
		}
		z.names[k] = nameAbsent
	case snfs1.CMLRename:
		z.inside(r.Dir, i)
		z.inside(r.ToDir, i)
		from, to := nameKey(r.Dir, r.Name), nameKey(r.ToDir, r.ToName)
		src, srcKnown := z.name(r.Dir, from)
		dst, dstKnown := z.name(r.ToDir, to)
		if !srcKnown || src == nameAbsent {
			src = namePresent
		}
		if !dstKnown {
			dst = nameUnknown
		}
		if from == to || (src >= 0 && src == dst) {
			// POSIX: a rename of a name onto itself, or onto another name of
			// the same object, changes nothing.
			z.subject[i] = max(src, -1)
			return
		}
		if src >= 0 {
			z.subject[i] = src
			switch {
			case dst >= 0:
				// Over an object the log made: dropping this RENAME
				// leaves the name as it is only if that object's records
				// are dropped too (then the name is absent on the
				// server), so src is dead only if dst is.
				z.objs[src].over = append(z.objs[src].over, dst)
			case dst != nameAbsent:
				z.objs[src].pinned = true
			}
		}
		if dst >= 0 {
			z.objs[dst].links--
		}
		z.names[to] = src
		if src < 0 && dst != nameAbsent {
			// Two names the log did not make may name one object (the
			// rename then did nothing): the source's state is unknown.
			delete(z.names, from)
		} else {
			z.names[from] = nameAbsent
		}
	case snfs1.CMLSetattr, snfs1.CMLStore:
		z.subject[i] = z.objOf(r.Obj)
	}
}

// mergeSetattrs applies rule 2 to the kept records, in place in z.recs's
// copy it makes, and returns how many SETATTRs were merged away.
func (z *optimizer) mergeSetattrs(keep []bool) int {
	z.recs = append([]snfs1.CMLRecord(nil), z.recs...)
	ident := func(o snfs1.ObjRef) string {
		if id := z.objOf(o); id >= 0 {
			return "o" + string(binary.BigEndian.AppendUint64(nil, uint64(id)))
		}
		return refKey(o)
	}
	last := map[string]int{} // identity -> the kept SETATTR that may merge forward
	n := 0
	for i := range z.recs {
		if !keep[i] {
			continue
		}
		r := &z.recs[i]
		if r.Op == snfs1.CMLSetattr {
			id := ident(r.Obj)
			if j, ok := last[id]; ok && z.recs[j].Attr.Size == nil {
				r.Attr = overlay(z.recs[j].Attr, r.Attr)
				keep[j] = false
				n++
			}
			last[id] = i
			continue
		}
		for _, o := range refs(r) {
			delete(last, ident(*o))
		}
		if s := z.subject[i]; s >= 0 {
			delete(last, "o"+string(binary.BigEndian.AppendUint64(nil, uint64(s))))
		} else if r.Op == snfs1.CMLUnlink || r.Op == snfs1.CMLRmdir || r.Op == snfs1.CMLRename {
			// A name whose object the log does not know may name any
			// object the log did not make.
			for id := range last {
				if id[0] != 'o' {
					delete(last, id)
				}
			}
		}
		if r.Op == snfs1.CMLRename {
			// The object a rename replaces.
			for id := range last {
				if id[0] != 'o' {
					delete(last, id)
				}
			}
		}
	}
	return n
}

// overlay returns a's settings with b's on top.
func overlay(a, b nfs3.Sattr) nfs3.Sattr {
	c := nfs3.Sattr{Atime: a.Atime, Mtime: a.Mtime}
	cp := func(p *uint32) *uint32 {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	c.Mode, c.UID, c.GID = cp(a.Mode), cp(a.UID), cp(a.GID)
	if a.Size != nil {
		v := *a.Size
		c.Size = &v
	}
	if b.Mode != nil {
		c.Mode = cp(b.Mode)
	}
	if b.UID != nil {
		c.UID = cp(b.UID)
	}
	if b.GID != nil {
		c.GID = cp(b.GID)
	}
	if b.Size != nil {
		v := *b.Size
		c.Size = &v
	}
	if b.Atime.How != nfs3.DontChange {
		c.Atime = b.Atime
	}
	if b.Mtime.How != nfs3.DontChange {
		c.Mtime = b.Mtime
	}
	return c
}
