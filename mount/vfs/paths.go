package vfs

import (
	"context"
	"log/slog"
	"path"
	"slices"
	"strings"

	"snfs/mount/cachedir"
	"snfs/nfs3"
)

// Where files are, for the log: a message about a file names its path on the
// mount ("/mnt/src/main.c"), which a user can act on, and not only its file id.
// The mount knows the name each object was last seen under and the directory
// it was seen in (a LOOKUP, CREATE, listing, LINK or RENAME through this mount:
// named), and walks those up to the root. Where a directory on the way is not
// known (the kernel forgot it, or recovery at a mount's start, when only the
// cache directory's record of the file's own name is there), the path says so
// ("(unknown directory)/main.c"); the file id stays beside it in the message.

// maxPathDepth bounds the walk (a cycle of stale names cannot loop).
const maxPathDepth = 256

// unknownDir stands for the directories of a path the mount does not know.
const unknownDir = "(unknown directory)"

// named records that i was seen as name in dir.
func (fs *FS) named(dir *Inode, name string, i *Inode) {
	if i == nil || dir == nil || name == "" || name == "." || name == ".." {
		return
	}
	i.mu.Lock()
	i.dir, i.name = dir.FH, name
	i.mu.Unlock()
}

// namedFromCache names i, if it has no name yet (recovery at a mount's start
// made it from a handle), as cf's record says it was last seen.
func (fs *FS) namedFromCache(i *Inode, cf *cachedir.File) {
	parent, name := cf.Origin()
	if name == "" {
		return
	}
	if len(parent) == 0 {
		parent = fs.cfg.Root
	}
	i.mu.Lock()
	if i.name == "" {
		i.dir, i.name = parent, name
	}
	i.mu.Unlock()
}

// pathOf is where i was last seen: its path on the mount, or as much of it as
// is known (see above).
func (fs *FS) pathOf(i *Inode) string {
	return fs.pathFrom(i, nil, "")
}

// pathOfFH is pathOf for a handle, which may have no Inode (recovery at the
// mount's start): then cf's record of where the file was, if any.
func (fs *FS) pathOfFH(fh nfs3.FH, cf *cachedir.File) string {
	if i := fs.lookupInode(fh); i != nil {
		if p := fs.pathOf(i); !strings.HasPrefix(p, unknownDir) || cf == nil {
			return p
		}
	}
	if cf == nil {
		return unknownDir + "/?"
	}
	parent, name := cf.Origin()
	if name == "" {
		return unknownDir + "/?"
	}
	return fs.pathFrom(nil, parent, name)
}

// pathFrom walks up from i, or from name in directory dir when i is nil.
func (fs *FS) pathFrom(i *Inode, dir nfs3.FH, name string) string {
	var parts []string
	if i == nil {
		parts = append(parts, name)
	} else {
		if string(i.FH) == string(fs.cfg.Root) {
			return fs.mountPath(nil)
		}
		i.mu.Lock()
		dir, name = i.dir, i.name
		i.mu.Unlock()
		if name == "" {
			return unknownDir + "/?"
		}
		parts = append(parts, name)
	}
	for range maxPathDepth {
		if string(dir) == string(fs.cfg.Root) {
			slices.Reverse(parts)
			return fs.mountPath(parts)
		}
		if d := fs.lookupInode(dir); d != nil {
			d.mu.Lock()
			dir, name = d.dir, d.name
			d.mu.Unlock()
		} else {
			fs.mu.Lock()
			dn := fs.dirNames[string(dir)]
			fs.mu.Unlock()
			dir, name = dn.dir, dn.name
		}
		if name == "" {
			break
		}
		parts = append(parts, name)
	}
	slices.Reverse(parts)
	return unknownDir + "/" + strings.Join(parts, "/")
}

// mountPath is the path of parts (names from the root down) on the mount.
func (fs *FS) mountPath(parts []string) string {
	mp := fs.cfg.MountPoint
	if mp == "" {
		mp = "/"
	}
	return path.Join(append([]string{mp}, parts...)...)
}

// pathAttr is the log attribute naming i's path.
func (fs *FS) pathAttr(i *Inode) slog.Attr { return slog.String("path", fs.pathOf(i)) }

// dirName is a directory's name and the directory it is in, learned by
// resolveDirs.
type dirName struct {
	dir  nfs3.FH
	name string
}

// maxResolve bounds what resolveDirs learns over a mount's life.
const maxResolve = 4096

// resolveDirs learns the names of dir and of the directories above it that
// the mount does not know, from the server (LOOKUP "..", then the parent's
// listing), so that a message about a file in dir names its path: recovery at
// a mount's start, before any lookup, knows only the file's own name and
// directory handle (its cache record). A failure leaves the rest unknown.
func (fs *FS) resolveDirs(ctx context.Context, dir nfs3.FH) {
	nc := fs.client(Cred{})
	for range maxPathDepth {
		if string(dir) == string(fs.cfg.Root) || len(dir) == 0 {
			return
		}
		if d := fs.lookupInode(dir); d != nil {
			d.mu.Lock()
			next, name := d.dir, d.name
			d.mu.Unlock()
			if name == "" {
				return
			}
			dir = next
			continue
		}
		fs.mu.Lock()
		dn, ok := fs.dirNames[string(dir)]
		full := len(fs.dirNames) >= maxResolve
		fs.mu.Unlock()
		if ok {
			dir = dn.dir
			continue
		}
		if full {
			return
		}
		up, err := nc.Lookup(ctx, dir, "..")
		if err != nil || up.Status != nfs3.OK || up.DirAttr == nil {
			return
		}
		ents, err := nc.ReadDirAll(ctx, up.Object, false)
		if err != nil {
			return
		}
		name := ""
		for _, e := range ents {
			if e.FileID == up.DirAttr.FileID && e.Name != "." && e.Name != ".." {
				name = e.Name
				break
			}
		}
		if name == "" || string(up.Object) == string(dir) {
			return
		}
		fs.mu.Lock()
		fs.dirNames[string(dir)] = dirName{dir: append(nfs3.FH(nil), up.Object...), name: name}
		fs.mu.Unlock()
		dir = up.Object
	}
}
