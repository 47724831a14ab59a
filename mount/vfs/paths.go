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
	i.NameMu.Lock()
	i.Dir, i.Name = dir.FH, name
	i.NameMu.Unlock()
}

// NamedFromCache names i, if it has no name yet (recovery at a mount's start
// made it from a handle), as cf's record says it was last seen.
func (fs *FS) NamedFromCache(i *Inode, cf *cachedir.File) {
	parent, name := cf.Origin()
	if name == "" {
		return
	}
	if len(parent) == 0 {
		parent = fs.Cfg.Root
	}
	i.NameMu.Lock()
	if i.Name == "" {
		i.Dir, i.Name = parent, name
	}
	i.NameMu.Unlock()
}

// PathOf is where i was last seen: its path on the mount, or as much of it as
// is known (see above).
func (fs *FS) PathOf(i *Inode) string {
	return fs.PathFrom(i, nil, "")
}

// PathOfFH is pathOf for a handle, which may have no Inode (recovery at the
// mount's start): then cf's record of where the file was, if any.
func (fs *FS) PathOfFH(fh nfs3.FH, cf *cachedir.File) string {
	if i := fs.LookupInode(fh); i != nil {
		if p := fs.PathOf(i); !strings.HasPrefix(p, unknownDir) || cf == nil {
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
	return fs.PathFrom(nil, parent, name)
}

// PathFrom walks up from i, or from name in directory dir when i is nil.
func (fs *FS) PathFrom(i *Inode, dir nfs3.FH, name string) string {
	var parts []string
	if i == nil {
		parts = append(parts, name)
	} else {
		if string(i.FH) == string(fs.Cfg.Root) {
			return fs.mountPath(nil)
		}
		i.NameMu.Lock()
		dir, name = i.Dir, i.Name
		i.NameMu.Unlock()
		if name == "" {
			return unknownDir + "/?"
		}
		parts = append(parts, name)
	}
	for range maxPathDepth {
		if string(dir) == string(fs.Cfg.Root) {
			slices.Reverse(parts)
			return fs.mountPath(parts)
		}
		if d := fs.LookupInode(dir); d != nil {
			d.NameMu.Lock()
			dir, name = d.Dir, d.Name
			d.NameMu.Unlock()
		} else {
			fs.Mu.Lock()
			dn := fs.dirNames[string(dir)]
			fs.Mu.Unlock()
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
	mp := fs.Cfg.MountPoint
	if mp == "" {
		mp = "/"
	}
	return path.Join(append([]string{mp}, parts...)...)
}

// PathAttr is the log attribute naming i's path.
func (fs *FS) PathAttr(i *Inode) slog.Attr { return slog.String("path", fs.PathOf(i)) }

// dirName is a directory's name and the directory it is in, learned by
// resolveDirs.
type dirName struct {
	dir  nfs3.FH
	name string
}

// maxResolve bounds what resolveDirs learns over a mount's life.
const maxResolve = 4096

// ResolveDirs learns the names of dir and of the directories above it that
// the mount does not know, from the server (LOOKUP "..", then the parent's
// listing), so that a message about a file in dir names its path: recovery at
// a mount's start, before any lookup, knows only the file's own name and
// directory handle (its cache record). A failure leaves the rest unknown.
func (fs *FS) ResolveDirs(ctx context.Context, dir nfs3.FH) {
	nc := fs.Client(Cred{})
	for range maxPathDepth {
		if string(dir) == string(fs.Cfg.Root) || len(dir) == 0 {
			return
		}
		if d := fs.LookupInode(dir); d != nil {
			d.NameMu.Lock()
			next, name := d.Dir, d.Name
			d.NameMu.Unlock()
			if name == "" {
				return
			}
			dir = next
			continue
		}
		fs.Mu.Lock()
		dn, ok := fs.dirNames[string(dir)]
		full := len(fs.dirNames) >= maxResolve
		fs.Mu.Unlock()
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
		fs.Mu.Lock()
		fs.dirNames[string(dir)] = dirName{dir: append(nfs3.FH(nil), up.Object...), name: name}
		fs.Mu.Unlock()
		dir = up.Object
	}
}
