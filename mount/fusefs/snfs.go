package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"snfs/mount/vfs"
)

// notifier turns the vfs's invalidations (snfs mode's callbacks, the end of
// caching at a file's last close) into kernel notifications.
type notifier struct {
	ep *epoch // nil: the kernel cannot drop all names at once (epoch.go)
}

func inodeOf(i *vfs.Inode) *fs.Inode {
	in, _ := i.Node().(*fs.Inode)
	return in
}

// nodesOf are the kernel's nodes of i: its own, and that of the local
// inode whose number it keeps (vfs.FS.KeepIno), by which the kernel may
// know it (child gives its lookups that node).
func nodesOf(i *vfs.Inode) []*fs.Inode {
	var out []*fs.Inode
	if in := inodeOf(i); in != nil {
		out = append(out, in)
	}
	if h := i.FS().InoHolder(i); h != nil {
		if in := inodeOf(h); in != nil && (len(out) == 0 || out[0] != in) {
			out = append(out, in)
		}
	}
	return out
}

// InvalidateData drops the kernel's pages and attributes of i.
func (notifier) InvalidateData(i *vfs.Inode) {
	for _, in := range nodesOf(i) {
		in.NotifyContent(0, 0)
	}
}

// InvalidateNames drops every name the kernel keeps (epoch.go).
func (n notifier) InvalidateNames() bool { return n.ep.bump() }

// CanInvalidateNames reports whether InvalidateNames works.
func (n notifier) CanInvalidateNames() bool { return n.ep != nil }

// InvalidateAttr drops the kernel's attributes of i.
func (notifier) InvalidateAttr(i *vfs.Inode) {
	for _, in := range nodesOf(i) {
		in.NotifyContent(-1, 0)
	}
}

// openFlags are the FOPEN flags of an open: DIRECT_IO for a write-shared
// file in snfs mode (the kernel must not cache its pages), else KEEP_CACHE
// when the vfs says the kernel's pages are still good.
func openFlags(f *vfs.File, keep bool) uint32 {
	switch {
	case f.Direct():
		return fuse.FOPEN_DIRECT_IO
	case keep:
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}
