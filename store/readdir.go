package store

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
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
// As): opening the directory checks read permission, and continuing a kept stream
// (dirstream.go) checks it again. bufSize sizes the getdents buffer: about what the
// caller can use, so the kernel does not read far past the point where fn will stop.
func (s *Store) ReadDir(dir *Node, cookie uint64, bufSize int, fn func(DirEntry) bool) (bool, error) {
	if dir.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, ErrNotDir
	}
	st := s.streams.take(dir.Key(), cookie)
	if st != nil {
		// The stream was opened by an earlier call, maybe for another caller:
		// check read permission for this one, as opening would.
		if err := rawsys.Faccessat2(dir.FD(), "", unix.R_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH); err != nil {
			rawsys.Close(st.fd)
			return false, opErr("opendir", err)
		}
	} else {
		fd, err := rawsys.Open(dir.procPath(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, opErr("opendir", err)
		}
		if cookie != 0 {
			if _, err := rawsys.Seek(fd, int64(cookie), 0); err != nil {
				rawsys.Close(fd)
				return false, opErr("seekdir", ErrBadCookie)
			}
		}
		st = &dirStream{fd: fd}
	}
	keep := false
	defer func() {
		if !keep {
			rawsys.Close(st.fd)
		}
	}()
	// stop keeps the stream for the call that continues after the last entry
	// returned, with the entries from i on still pending.
	stop := func(ents []DirEntry, i int) (bool, error) {
		next := cookie
		if i > 0 {
			next = ents[i-1].Cookie
		}
		st.pending = append(st.pending[:0:0], ents[i:]...)
		s.streams.put(dir.Key(), next, st)
		keep = true
		return false, nil
	}
	if len(st.pending) > 0 {
		ents := st.pending
		st.pending = nil
		for i, de := range ents {
			if !fn(de) {
				return stop(ents, i)
			}
			cookie = de.Cookie
		}
	}
	buf := make([]byte, min(max(bufSize, 1024), 64<<10))
	for {
		n, err := rawsys.Getdents(st.fd, buf)
		if err != nil {
			return false, opErr("getdents", err)
		}
		if n == 0 {
			return true, nil
		}
		ents, err := parseDirents(buf[:n])
		if err != nil {
			return false, err
		}
		for i, de := range ents {
			if !fn(de) {
				return stop(ents, i)
			}
			cookie = de.Cookie
		}
	}
}

// parseDirents decodes linux_dirent64 records.
func parseDirents(b []byte) ([]DirEntry, error) {
	ents := make([]DirEntry, 0, len(b)/32)
	for len(b) >= 19 {
		reclen := int(binary.LittleEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			return nil, opErr("getdents", unix.EIO)
		}
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		ents = append(ents, DirEntry{Name: string(name), Ino: binary.LittleEndian.Uint64(b[0:8]),
			Cookie: binary.LittleEndian.Uint64(b[8:16])})
		b = b[reclen:]
	}
	return ents, nil
}
