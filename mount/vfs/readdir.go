package vfs

import (
	"context"

	"snfs/nfs3"
)

// DirEntry is one name of a listing, with its object when READDIRPLUS gave
// its handle and attributes.
type DirEntry struct {
	Name   string
	FileID uint64
	Type   nfs3.FType // 0 when unknown
	Entry  *Entry     // nil when the listing did not carry it
}

// OpenDir and ReleaseDir count a directory's opens (an open directory
// removed elsewhere keeps answering fstat).
func (fs *FS) OpenDir(i *Inode) {
	i.Mu.Lock()
	i.Opens++
	i.Mu.Unlock()
}

// ReleaseDir ends an OpenDir.
func (fs *FS) ReleaseDir(i *Inode) {
	i.Mu.Lock()
	i.Opens--
	i.Mu.Unlock()
}

// OpenDirCached decides an open of dir by c: cached reports whether the
// kernel may keep and fill its cache of the listing (FOPEN_KEEP_CACHE and
// FOPEN_CACHE_DIR), and ents, when not nil, is the listing read from the
// server for this open. The kernel's listing is good while dir's attributes
// are fresh (the attribute cache, AcDirMin..AcDirMax) and show the version
// they showed when the kernel was first let cache it: the Linux client keeps
// a directory's pages the same way. An open by credentials that have not
// listed dir at that version reads it (the server checks their permission);
// so an open served from the kernel's cache costs no call while the
// attributes are fresh. Any other version, this client's own changes
// included (the kernel resets its listing after its own, but not after a
// silly-renamed file removed at release), makes this open uncached, which
// drops the kernel's listing, and the next open caches again.
func (fs *FS) OpenDirCached(ctx context.Context, dir *Inode, c Cred) (ents []DirEntry, cached bool, err error) {
	if ents, cached, ok, err := fs.ops.ListNames(ctx, dir, c, true); ok {
		return ents, cached, err
	}
	if _, _, err := fs.Getattr(ctx, dir, c); err != nil {
		return nil, false, err
	}
	dir.Mu.Lock()
	v := changeOf(&dir.Attr)
	wasOK := dir.listedOK
	if wasOK && dir.listed != v {
		dir.listedOK, dir.listedBy, dir.listing = false, nil, nil // changed: this open drops the kernel's listing
	} else if dir.listedForLocked(c) {
		dir.Mu.Unlock()
		return nil, true, nil
	}
	same := wasOK && dir.listedOK
	dir.Mu.Unlock()
	if ents, err = fs.ReadDirCore(ctx, dir, c); err != nil {
		return nil, false, err
	}
	dir.Mu.Lock()
	defer dir.Mu.Unlock()
	switch {
	case wasOK && !same:
		return ents, false, nil
	case !dir.listedOK && !wasOK:
		// Nothing cached in the kernel since the last drop: cache from here
		// on, at the version seen before the listing was read (a change
		// in between only makes the next open read again).
		dir.listed, dir.listedOK, dir.listedBy = v, true, map[string]bool{}
	}
	if !dir.listedOK || dir.listed != v {
		return ents, false, nil
	}
	dir.listedBy[c.Key()] = true
	dir.listing = make([]DirEntry, len(ents))
	for k, e := range ents {
		dir.listing[k] = DirEntry{Name: e.Name, FileID: e.FileID, Type: e.Type}
	}
	return ents, true, nil
}

// listedForLocked reports whether the kernel's listing of dir is good for
// c: c listed dir at the version its attributes show now (OpenDirCached).
// Called with dir.mu held.
func (dir *Inode) listedForLocked(c Cred) bool {
	return dir.listedOK && dir.listed == changeOf(&dir.Attr) && dir.listedBy[c.Key()]
}

// ListedDir is the listing for an open OpenDirCached let the kernel serve
// from its cache, when the kernel asks for it after all: Linux may not
// keep (or not finish filling) its copy, and that is no change of the
// directory. While dir stays at the version it was listed at, by c, the
// listing kept then answers, without a call; its entries carry no
// attributes (lookups go the usual way). Otherwise it is read again.
func (fs *FS) ListedDir(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	if ents, _, ok, err := fs.ops.ListNames(ctx, dir, c, false); ok {
		return ents, err
	}
	if _, _, err := fs.Getattr(ctx, dir, c); err != nil {
		return nil, err
	}
	dir.Mu.Lock()
	if dir.listedForLocked(c) && dir.listing != nil {
		ents := dir.listing
		dir.Mu.Unlock()
		fs.stats.ListingsKept.Add(1)
		return ents, nil
	}
	dir.Mu.Unlock()
	return fs.ReadDirCore(ctx, dir, c)
}

// ReadDir lists dir (the mode's cache of directories first).
func (fs *FS) ReadDir(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	if ents, _, ok, err := fs.ops.ListNames(ctx, dir, c, false); ok {
		return ents, err
	}
	return fs.ReadDirCore(ctx, dir, c)
}

// ReadDirCore is ReadDir from the server (READDIRPLUS, RFC 1813 section
// 3.3.17; READDIR, section 3.3.16, when the server does not do PLUS).
func (fs *FS) ReadDirCore(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	// ReadDirAll returns a status as its error (its replies are many).
	list := func(plus bool) ([]nfs3.Entry, error) {
		var all []nfs3.Entry
		err := fs.do(ctx, func() (nfs3.Status, error) {
			var err error
			all, err = fs.Client(c).ReadDirAll(ctx, dir.FH, plus)
			if st, ok := err.(nfs3.Status); ok {
				return st, nil
			}
			return 0, err
		})
		return all, err
	}
	start := fs.AttrStart()
	all, err := list(true)
	if err == nfs3.ErrNotSupp {
		all, err = list(false)
	}
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(all))
	for _, e := range all {
		d := DirEntry{Name: e.Name, FileID: e.FileID}
		if e.Attr != nil {
			d.Type = e.Attr.Type
			if e.Handle != nil && e.Name != "." && e.Name != ".." {
				ci := fs.Inode(e.Handle, e.Attr, start)
				fs.named(dir, e.Name, ci)
				en := fs.entry(dir, ci)
				d.Entry = &en
			}
		}
		out = append(out, d)
	}
	return out, nil
}
