package vfs

import "snfs/nfs3"

// The inode number the kernel is given for an object.
//
// Normally an object's number is the server's file id (Inode.FileID, with
// Gen telling a reused number apart). An object the mode made locally
// (snfs mode's provisional objects, docs/mount.md "The mount's side") has a
// number of the mode's own, in the range LocalIno reserves, until the
// server makes it; POSIX wants st_ino unchanged for the life of the file
// (hard links are compared by it, tar, rsync and find key files by st_dev
// and st_ino), so when the server makes it the mode asks (KeepIno) that
// the real object keep the local number while the mount knows the local
// inode or the real one: the kernel is then told the same number (and
// generation) for it whatever path reaches it - the descriptor open on the
// local inode, a later lookup of its name, a listing - and go-fuse gives
// those lookups the node the kernel already has. The number is kept for
// the object's handle for the mount's life (up to maxAliases objects), also
// once the kernel forgot both inodes (the mount drops every kernel name at
// a permit's end: docs/mount.md "The name cache"), so that a later lookup
// gives the same number again; only a listing that carries no handles
// (DirIno) falls back to the server's number for an object the mount no
// longer knows.

// LocalIno is the start of the inode numbers the mount gives objects the
// server has not made (up to, not including, ^0, go-fuse's own): the top
// 8 bits set. No Linux file system gives such inode numbers (ext4's are 32
// bits, xfs's and btrfs's far below, tmpfs's a counter; overlayfs's xino
// puts a layer's index in the top bits over the real number but keeps the
// highest bit clear for it, setting that bit only over a 32-bit counter for
// its non-persistent numbers), and the server's file ids are its export's
// inode numbers (server/attr.go).
const LocalIno uint64 = 0xff << 56

// InoID is what the kernel knows an object by: its inode number and the
// generation that tells a reused number apart.
type InoID struct{ Ino, Gen uint64 }

// inoAlias: the object of handle real (file id fileID) is reported as id,
// the number of holder, the inode the mode made it as locally; holder is
// nil once dropped. Kept for the mount's life (maxAliases bounds the count);
// in aliasByID only while holder or real's inode is in FS.Inodes (a file id
// may be reused by another object once this one is gone).
type inoAlias struct {
	id     InoID
	real   string
	fileID uint64
	holder *Inode
}

// KeepIno records that the object of handle real, file id fileID, is the
// one holder stood for until the server made it: it is reported with
// holder's number and generation (Ino) while holder's or its own inode is
// known. An inode of real already known with a kernel node of its own keeps
// its number (the kernel knows it by that one: its file id's, or the number
// an earlier holder gave it): false then, the kernel has two nodes of the
// object.
func (fs *FS) KeepIno(holder *Inode, real nfs3.FH, fileID uint64) bool {
	if holder == nil || string(holder.FH) == string(real) {
		return true
	}
	id := holder.Ino()
	ri := fs.LookupInode(real)
	if ri != nil && liveNode(ri.Node()) && ri.Ino() != id {
		return false // the kernel knows it by the number it has
	}
	a := &inoAlias{id: id, real: string(real), fileID: fileID, holder: holder}
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if fs.aliases == nil {
		fs.aliases, fs.aliasByID, fs.aliasOf = map[string]*inoAlias{}, map[uint64]*inoAlias{}, map[*Inode]*inoAlias{}
	}
	if old := fs.aliases[a.real]; old != nil && old.holder != nil {
		delete(fs.aliasOf, old.holder)
	}
	fs.aliases[a.real], fs.aliasOf[holder] = a, a
	if ri := fs.Inodes[a.real]; ri != nil {
		ri.alias.Store(&id)
		if a.fileID == 0 {
			a.fileID = ri.FileID
		}
	}
	if a.fileID != 0 {
		fs.aliasByID[a.fileID] = a
	}
	return true
}

// maxAliases bounds the objects whose kept number outlives every inode of
// theirs; past it, one such (any) is forgotten for each new one.
const maxAliases = 1 << 16

// Ino is the number and generation the kernel is told for i.
func (i *Inode) Ino() InoID {
	if a := i.alias.Load(); a != nil {
		return *a
	}
	return InoID{i.FileID, i.Gen}
}

// DirIno is the number a listing reports for e: its inode's when the
// listing carried it, else the kept number of the object of that file id,
// else the file id.
func (fs *FS) DirIno(e DirEntry) uint64 {
	if e.Entry != nil && e.Entry.Inode != nil {
		return e.Entry.Inode.Ino().Ino
	}
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if a := fs.aliasByID[e.FileID]; a != nil {
		return a.id.Ino
	}
	return e.FileID
}

// InoHolder is the inode whose number i keeps (KeepIno), or nil: the
// kernel may know the object by that inode's node.
func (fs *FS) InoHolder(i *Inode) *Inode {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if a := fs.aliases[string(i.FH)]; a != nil {
		return a.holder
	}
	return nil
}

// KeptBy is the known inode of the object whose number holder's is
// (KeepIno), or nil: the server's object holder stood for.
func (fs *FS) KeptBy(holder *Inode) *Inode {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if a := fs.aliasOf[holder]; a != nil {
		return fs.Inodes[a.real]
	}
	return nil
}

// KeptReal is the handle of the object whose number holder's is (KeepIno),
// whether or not an inode of it is known: the server's object holder stood
// for.
func (fs *FS) KeptReal(holder *Inode) (nfs3.FH, bool) {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if a := fs.aliasOf[holder]; a != nil {
		return nfs3.FH(a.real), true
	}
	return nil, false
}

// newAliasLocked gives a new inode its kept number, if any (fs.Mu held,
// i not yet published).
func (fs *FS) newAliasLocked(i *Inode) {
	if a := fs.aliases[string(i.FH)]; a != nil {
		id := a.id
		i.alias.Store(&id)
		if a.fileID == 0 {
			a.fileID = i.FileID
		}
		fs.aliasByID[a.fileID] = a
	}
}

// knownAgainLocked: i, dropped, is back in fs.Inodes (Known; fs.Mu held):
// its alias is as before the drop, as the object's inode or as the holder
// (found by its number: dropped, the alias forgot its holder).
func (fs *FS) knownAgainLocked(i *Inode) {
	if a := fs.aliases[string(i.FH)]; a != nil {
		fs.aliasByID[a.fileID] = a
		return
	}
	if i.Ino().Ino < LocalIno {
		return
	}
	for _, a := range fs.aliases {
		if a.holder == nil && a.id == i.Ino() {
			a.holder, fs.aliasOf[i] = i, a
			fs.aliasByID[a.fileID] = a
			return
		}
	}
}

// droppedLocked: i left fs.Inodes (fs.Mu held). An alias goes once neither
// its holder nor its object's inode is known. When i held one, the object's
// inode is returned (Forget drops it too if the kernel has no node of its
// own for it: the kernel knew the object only through the holder's).
func (fs *FS) droppedLocked(i *Inode) (real *Inode) {
	if a := fs.aliasOf[i]; a != nil {
		delete(fs.aliasOf, i)
		a.holder = nil
		ri := fs.Inodes[a.real]
		if ri == nil {
			fs.dormantAliasLocked(a)
		}
		return ri
	}
	if a := fs.aliases[string(i.FH)]; a != nil && a.holder == nil {
		fs.dormantAliasLocked(a)
	}
	return nil
}

// dormantAliasLocked: no inode of a's object is known any more. Its number
// is kept for its handle (newAliasLocked gives it to the next inode of it),
// not for its file id; beyond maxAliases, another dormant one is forgotten.
func (fs *FS) dormantAliasLocked(a *inoAlias) {
	if fs.aliasByID[a.fileID] == a {
		delete(fs.aliasByID, a.fileID)
	}
	if len(fs.aliases) <= maxAliases {
		return
	}
	for k, o := range fs.aliases {
		if o != a && o.holder == nil && fs.Inodes[k] == nil {
			delete(fs.aliases, k)
			if fs.aliasByID[o.fileID] == o {
				delete(fs.aliasByID, o.fileID)
			}
			return
		}
	}
}

// liveNode reports whether n (Inode.node) is a node the kernel knows.
func liveNode(n any) bool {
	f, ok := n.(interface{ Forgotten() bool })
	return ok && !f.Forgotten()
}
