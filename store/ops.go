package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// The operations below run with the caller's identity: call them inside As.
// Errors wrap the syscall.Errno the kernel returned.

func opErr(op string, err error) error { return fmt.Errorf("store: %s: %w", op, err) }

// child returns the handle and attributes of name in dir, without following
// symlinks. The attributes are always read afresh; the handle comes from the handle
// cache when the directory has not changed since it was learned (handlecache.go).
// A handle learned here is read from a descriptor of the file whose attributes
// were read: by name, the name could be replaced between the two, and the cache
// would keep the new file's handle under the old file's inode number, to be
// handed out when that number is reused.
func (s *Store) child(dir *Node, name string) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := rawsys.Fstatat(dir.FD(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, st, opErr("lookup", err)
	}
	if fh, ok := s.handles.get(dir.Export.ID, dir.Key(), dir.Stat.Ctim, name, st.Ino); ok {
		return fh, st, nil
	}
	fd, err := rawsys.Openat(dir.FD(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, opErr("lookup", err)
	}
	defer rawsys.Close(fd)
	if err := rawsys.Fstat(fd, &st); err != nil {
		return nil, st, opErr("lookup", err)
	}
	kh, mid, err := rawsys.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, st, opErr("name_to_handle_at", err)
	}
	if mid != dir.Export.mountID {
		return nil, st, ErrCrossMount
	}
	key := kernelKey(kh)
	// Entries made by this call (MKDIR, ...) go in under the directory's ctime from
	// before the change, which no longer matches: they are never served from here.
	fh := s.makeHandle(dir.Export, key)
	s.handles.put(dir.Export.ID, dir.Key(), dir.Stat.Ctim, name, st.Ino, fh)
	return fh, st, nil
}

// ForgetEntries forgets the handles cached for dir's entries: one looked up
// in it named a file that was gone when it was resolved (replaced within one
// timestamp tick, its inode number reused, the cache could hand it out again).
func (s *Store) ForgetEntries(dir *Node) { s.handles.forgetDir(dir.Key()) }

// Lookup finds name in dir. "." is dir itself and ".." of an export root is the root.
func (s *Store) Lookup(dir *Node, name string) ([]byte, unix.Stat_t, error) {
	if dir.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, unix.Stat_t{}, ErrNotDir
	}
	if name == "." || (name == ".." && dir.IsRoot()) {
		// Still check search permission on dir, as a local lookup would.
		if err := rawsys.Faccessat2(dir.FD(), "", unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH); err != nil {
			return nil, unix.Stat_t{}, opErr("lookup", err)
		}
		return dir.Handle, dir.Stat, nil
	}
	return s.child(dir, name)
}

// CreateResult describes a file made (or found, for UNCHECKED and a replayed
// EXCLUSIVE create) by Create.
type CreateResult struct {
	Handle  []byte
	Stat    unix.Stat_t
	Created bool
}

// CreateMode chooses Create's behaviour when the name exists.
type CreateMode int

// Create modes, as NFSv3's createmode3.
const (
	CreateUnchecked CreateMode = iota
	CreateGuarded
	CreateExclusive
)

// Create makes a regular file. For CreateExclusive, verf is stored in the file's
// atime and mtime seconds (as Linux nfsd does), so that a retransmitted create with
// the same verifier succeeds and one with another verifier fails with EEXIST.
func (s *Store) Create(dir *Node, name string, mode uint32, how CreateMode, verf [8]byte) (CreateResult, error) {
	var res CreateResult
	fd, err := rawsys.Openat(dir.FD(), name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o7777)
	if errors.Is(err, unix.EEXIST) && how != CreateGuarded {
		fh, st, err := s.child(dir, name)
		if err != nil {
			return res, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return res, opErr("create", unix.EEXIST)
		}
		if how == CreateExclusive && (uint32(st.Atim.Sec) != be32(verf[:4]) || uint32(st.Mtim.Sec) != be32(verf[4:])) {
			return res, opErr("create", unix.EEXIST)
		}
		return CreateResult{Handle: fh, Stat: st}, nil
	}
	if err != nil {
		return res, opErr("create", err)
	}
	if how == CreateExclusive {
		ts := []unix.Timespec{{Sec: int64(be32(verf[:4]))}, {Sec: int64(be32(verf[4:]))}}
		if err := rawsys.UtimesNanoAt(unix.AT_FDCWD, procFD(fd), ts, 0); err != nil {
			rawsys.Close(fd)
			return res, opErr("create verifier", err)
		}
	}
	kh, _, err := rawsys.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		rawsys.Close(fd)
		return res, opErr("name_to_handle_at", err)
	}
	if err := rawsys.Fstat(fd, &res.Stat); err != nil {
		rawsys.Close(fd)
		return res, opErr("fstat", err)
	}
	key := kernelKey(kh)
	res.Handle, res.Created = s.makeHandle(dir.Export, key), true
	s.cache.release(s.cache.add(key, fd, fd))
	s.changed([]*Node{dir}, key)
	return res, nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Mkdir makes a directory.
func (s *Store) Mkdir(dir *Node, name string, mode uint32) ([]byte, unix.Stat_t, error) {
	if err := rawsys.Mkdirat(dir.FD(), name, mode&0o7777); err != nil {
		return nil, unix.Stat_t{}, opErr("mkdir", err)
	}
	s.changed([]*Node{dir})
	return s.child(dir, name)
}

// Symlink makes a symbolic link to target.
func (s *Store) Symlink(dir *Node, name, target string) ([]byte, unix.Stat_t, error) {
	if err := rawsys.Symlinkat(target, dir.FD(), name); err != nil {
		return nil, unix.Stat_t{}, opErr("symlink", err)
	}
	s.changed([]*Node{dir})
	return s.child(dir, name)
}

// Mknod makes a device, socket or FIFO; mode includes the S_IF* type bits.
func (s *Store) Mknod(dir *Node, name string, mode uint32, dev uint64) ([]byte, unix.Stat_t, error) {
	if err := rawsys.Mknodat(dir.FD(), name, mode, int(dev)); err != nil {
		return nil, unix.Stat_t{}, opErr("mknod", err)
	}
	s.changed([]*Node{dir})
	return s.child(dir, name)
}

// victim returns the cache key of dir/name, if it names anything.
func (s *Store) victim(dir *Node, name string) string {
	fd, err := rawsys.Openat(dir.FD(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	kh, _, err := rawsys.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		rawsys.Close(fd)
		return ""
	}
	key := kernelKey(kh)
	// Keep a descriptor of the object in the cache (add closes fd if one is
	// there already): if the object loses its last link, its last close, which
	// frees it, then happens in the background rather than inside the unlink.
	s.cache.release(s.cache.add(key, fd, -1))
	return key
}

// dropIfGone closes cached descriptors of key, an object of e, if it has no links
// left, so that a removed file's space is freed and its handle turns stale.
func (s *Store) dropIfGone(e *Export, key string) {
	if key == "" {
		return
	}
	ent := s.cache.get(key)
	if ent == nil {
		return
	}
	var st unix.Stat_t
	gone := rawsys.Fstat(ent.fd, &st) == nil && st.Nlink == 0
	s.cache.release(ent)
	if gone {
		// Only freeing blocks on a discarding file system is slow (Export.slowFree);
		// anything else is closed here, which is cheaper than waking the
		// background goroutine.
		s.cache.invalidate(key, e.slowFree && st.Blocks > 0, st.Blocks*512 > largeFree)
	}
}

// Remove unlinks a non-directory.
func (s *Store) Remove(dir *Node, name string) error {
	key := s.victim(dir, name)
	if err := rawsys.Unlinkat(dir.FD(), name, 0); err != nil {
		return opErr("remove", err)
	}
	s.changed([]*Node{dir}, key)
	s.dropIfGone(dir.Export, key)
	return nil
}

// Rmdir removes an empty directory.
func (s *Store) Rmdir(dir *Node, name string) error {
	key := s.victim(dir, name)
	if err := rawsys.Unlinkat(dir.FD(), name, unix.AT_REMOVEDIR); err != nil {
		return opErr("rmdir", err)
	}
	s.changed([]*Node{dir}, key)
	s.dropIfGone(dir.Export, key)
	return nil
}

// Rename renames from/fromName to to/toName, replacing what was there.
func (s *Store) Rename(from *Node, fromName string, to *Node, toName string) error {
	key := s.victim(to, toName)
	moved := s.victim(from, fromName) // its ctime changes
	if err := rawsys.Renameat(from.FD(), fromName, to.FD(), toName); err != nil {
		return opErr("rename", err)
	}
	s.changed([]*Node{from, to}, key, moved)
	s.dropIfGone(to.Export, key)
	return nil
}

// Link makes dir/name a hard link to n. It goes through /proc/self/fd (a magic link)
// because linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH, which the caller's
// identity does not have.
func (s *Store) Link(n, dir *Node, name string) error {
	if err := rawsys.Linkat(unix.AT_FDCWD, n.procPath(), dir.FD(), name, unix.AT_SYMLINK_FOLLOW); err != nil {
		return opErr("link", err)
	}
	s.changed([]*Node{n, dir})
	return nil
}

// Readlink returns a symbolic link's target.
func (s *Store) Readlink(n *Node) (string, error) {
	buf := make([]byte, 4096)
	k, err := rawsys.Readlinkat(n.FD(), "", buf)
	if err != nil {
		return "", opErr("readlink", err)
	}
	return string(buf[:k]), nil
}

// Access reports which of R_OK, W_OK, X_OK (bits of want) the caller has on n,
// as the kernel decides it (mode bits, ACLs, capabilities, read-only mounts).
func (s *Store) Access(n *Node, want uint32) uint32 {
	var got uint32
	for _, m := range []uint32{unix.R_OK, unix.W_OK, unix.X_OK} {
		if want&m != 0 && rawsys.Faccessat2(n.FD(), "", m, unix.AT_EACCESS|unix.AT_EMPTY_PATH) == nil {
			got |= m
		}
	}
	return got
}

// SetAttr is what Setattr changes; nil fields stay as they are.
type SetAttr struct {
	Mode  *uint32
	UID   *uint32
	GID   *uint32
	Atime *unix.Timespec // UTIME_NOW for server time
	Mtime *unix.Timespec
}

// Setattr changes ownership, mode and times (size is Truncate's).
func (s *Store) Setattr(n *Node, a SetAttr) error {
	defer s.changed([]*Node{n}) // also after a failure part way
	if a.UID != nil || a.GID != nil {
		uid, gid := -1, -1
		if a.UID != nil {
			uid = int(*a.UID)
		}
		if a.GID != nil {
			gid = int(*a.GID)
		}
		if err := rawsys.Fchownat(n.FD(), "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return opErr("chown", err)
		}
	}
	isLink := n.Stat.Mode&unix.S_IFMT == unix.S_IFLNK
	if a.Mode != nil {
		if isLink {
			return opErr("chmod", unix.EOPNOTSUPP)
		}
		if err := rawsys.Fchmodat(unix.AT_FDCWD, n.procPath(), *a.Mode&0o7777); err != nil {
			return opErr("chmod", err)
		}
	}
	if a.Atime != nil || a.Mtime != nil {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if a.Atime != nil {
			ts[0] = *a.Atime
		}
		if a.Mtime != nil {
			ts[1] = *a.Mtime
		}
		// A symlink's own times (utimensat with AT_SYMLINK_NOFOLLOW on the
		// client, cp -a, touch -h): its O_PATH descriptor named with
		// AT_EMPTY_PATH (Linux 5.8+) is the link itself; the /proc path
		// would be followed to its target.
		dirfd, path, flags := unix.AT_FDCWD, n.procPath(), 0
		if isLink {
			dirfd, path, flags = n.FD(), "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW
		}
		if err := rawsys.UtimesNanoAt(dirfd, path, ts, flags); err != nil {
			return opErr("utimes", err)
		}
	}
	return nil
}

// Statfs returns the file system statistics of n's file system.
func (s *Store) Statfs(n *Node) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(n.FD(), &st); err != nil {
		return st, opErr("statfs", err)
	}
	return st, nil
}
