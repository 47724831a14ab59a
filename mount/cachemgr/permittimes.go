package cachemgr

import (
	"context"
	"sync"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// The attributes a change made locally under a write-back permit changes
// besides the entries (docs/mount.md "The mount's side"), as the server's
// file system will when the change is reintegrated and as POSIX says:
//
//   - the directory whose entries change (a CREATE, MKDIR, SYMLINK, LINK,
//     REMOVE, RMDIR made in it, a RENAME from or to it): its mtime and
//     ctime become the change's time, and an MKDIR adds one to its link
//     count, an RMDIR takes one away (the subdirectory's ".."). A
//     directory's own attributes are covered by its permit (another
//     client's GETATTR of it recalls the permit first, docs/protocol.md
//     21.4), and this mount serves them from its cache under the
//     directory's promise, as it serves a SETATTR of it made locally
//     (permitsetattr.go);
//   - an object that loses one of several names (a REMOVE of a multiply
//     linked file, a RENAME over one): one link fewer, its ctime the
//     change's, in its inode and in the cached entries naming it, as
//     LocalLink adds one (permitlink.go).
//
// An object's link count is not covered by the permit (permitlink.go): a
// SETATTR or an OPEN of such an object through the server, whose reply
// gives the server's count, sends the log first (beforeLinkedCall), so
// that the count it answers has the links made and removed here. Left to
// the OPEN's reply, a file linked here and opened by its new name showed
// one link again, and the removal of its first name while open took it
// for the last: the file was hidden, and at its close dropped with the
// data written through the open (TestMountSNFSPermitsRemoveOpenLinks).

// localDirChanged gives dir, whose entries a change made locally at now
// changed, its mtime and ctime now and links more links (an MKDIR: 1, an
// RMDIR: -1). Called under the change's permits.logged, after DirChanged.
func (sn *snfsFS) localDirChanged(dir *vfs.Inode, links int, now nfs3.Time) {
	dir.Mu.Lock()
	a := dir.Attr
	dir.Mu.Unlock()
	if a.Type != nfs3.TypeDir {
		return // its attributes not known: the server's, when asked
	}
	a.Mtime, a.Ctime = now, now
	switch {
	case links > 0:
		a.Nlink += uint32(links)
	case links < 0 && a.Nlink > uint32(-links):
		a.Nlink -= uint32(-links)
	}
	sn.setLocalAttr(dir, &a) // permitsetattr.go
}

// localUnlinked: the object fh, a name of which (its cached entry's
// attributes ea) a change made locally at now removed, keeps its other
// names, if it has any, with one link fewer and ctime now. A directory or
// an object with one link is gone with its name.
func (sn *snfsFS) localUnlinked(fh nfs3.FH, ea nfs3.Fattr, now nfs3.Time) {
	a := ea
	i := sn.FS.LookupInode(fh)
	if i != nil {
		i.Mu.Lock()
		if i.Attr.Type != 0 {
			a = i.Attr
		}
		i.Mu.Unlock()
	}
	if a.Type == 0 || a.Type == nfs3.TypeDir || a.Nlink <= 1 {
		if i != nil {
			i.Invalidate() // gone, or its attributes unknown: the server's
		}
		return
	}
	a.Nlink--
	a.Ctime = now
	if i != nil {
		sn.setLocalAttr(i, &a)
	} else {
		sn.names.entryAttr(fh, &a)
	}
	sn.permits.links.add(fh)
}

// localLinks: the objects the server made whose link count a change made
// locally changed (LocalLink, localUnlinked) since the log was last sent
// before a SETATTR of them. Bounded: past maxLocalLinks of them, every
// SETATTR through the server sends the log first until one has.
type localLinks struct {
	mu   sync.Mutex
	fhs  map[string]struct{}
	many bool
}

const maxLocalLinks = 4096

func (l *localLinks) add(fh nfs3.FH) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fhs == nil || len(l.fhs) >= maxLocalLinks {
		l.many = l.fhs != nil
		l.fhs = map[string]struct{}{}
	}
	l.fhs[string(fh)] = struct{}{}
}

// list returns them; many: there were too many to tell.
func (l *localLinks) list() (fhs []nfs3.FH, many bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fhs = make([]nfs3.FH, 0, len(l.fhs))
	for fh := range l.fhs {
		fhs = append(fhs, nfs3.FH(fh))
	}
	return fhs, l.many
}

// has reports whether fh is one (or there were too many to tell).
func (l *localLinks) has(fh nfs3.FH) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.fhs[string(fh)]
	return ok || l.many
}

// take reports whether fh is one (or there were too many to tell), and
// forgets it: the caller sends the log.
func (l *localLinks) take(fh nfs3.FH) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.fhs[string(fh)]
	delete(l.fhs, string(fh))
	if l.many {
		l.many, ok = false, true
	}
	return ok
}

// beforeLinkedCall sends the log before a call through the server about i
// (what: a SETATTR, an OPEN) whose reply gives its attributes, when a
// change made locally changed its link count: the attributes the server
// answers then count the links made and removed here.
func (sn *snfsFS) beforeLinkedCall(ctx context.Context, i *vfs.Inode, what string) error {
	p := sn.permits
	if p == nil || sn.disc.offline() {
		// Offline nothing is asked of the server (an open served by a
		// kept one, offlinelink.go's links), and the log goes first at
		// reconnection.
		return nil
	}
	if !p.links.take(i.FH) {
		return nil
	}
	if err := p.flush(ctx, what+" of an object linked or unlinked locally"); err != nil {
		p.links.add(i.FH)
		return err
	}
	return nil
}

// nowNFS is the time a change made locally is made at.
func nowNFS() nfs3.Time { return vfs.NFSTime(time.Now()) }
