package store

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// DirEntry is one entry read from a directory.
type DirEntry struct {
	Name   string
	Ino    uint64
	Cookie uint64 // the kernel's offset just past this entry (d_off)
}

// ReadDir lists dir from cookie (0 = the start), calling fn for each entry until it
// returns false. Cookies are the file system's own directory offsets (hash order on
// ext4), which stay valid while entries are added or removed, so a client paging
// through a changing directory sees every name that stays in it exactly once. It
// reports whether the end of the directory was reached. Runs as the caller (inside
// As): opening the directory checks read permission.
// bufSize sizes the getdents buffer: about what the caller can use, so the kernel
// does not read far past the point where fn will stop.
func (s *Store) ReadDir(dir *Node, cookie uint64, bufSize int, fn func(DirEntry) bool) (bool, error) {
	if dir.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, ErrNotDir
	}
	fd, err := unix.Open(dir.procPath(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, opErr("opendir", err)
	}
	defer unix.Close(fd)
	if cookie != 0 {
		if _, err := unix.Seek(fd, int64(cookie), 0); err != nil {
			return false, opErr("seekdir", ErrBadCookie)
		}
	}
	buf := make([]byte, min(max(bufSize, 1024), 64<<10))
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return false, opErr("getdents", err)
		}
		if n == 0 {
			return true, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.LittleEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return false, opErr("getdents", unix.EIO)
			}
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			de := DirEntry{Name: string(name), Ino: binary.LittleEndian.Uint64(b[0:8]),
				Cookie: binary.LittleEndian.Uint64(b[8:16])}
			if !fn(de) {
				return false, nil
			}
			b = b[reclen:]
		}
	}
}

// ChildAttr returns the handle and attributes of dir/name (for READDIRPLUS).
func (s *Store) ChildAttr(dir *Node, name string) ([]byte, unix.Stat_t, error) {
	return s.Lookup(dir, name)
}
