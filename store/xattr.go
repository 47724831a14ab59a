package store

import (
	"errors"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Extended attributes of the user namespace ("user."), read and written on the
// object itself through its /proc descriptor path, with the caller's identity
// (inside As), so the kernel decides permission exactly as for a local
// process: reading a value needs read permission, setting or removing one
// write permission (and, in a sticky directory, ownership); listing needs
// none. Objects other than regular files and directories cannot hold user
// attributes in Linux (a symlink's /proc path would also be followed to its
// target): getting one is ENODATA, setting or removing one EPERM, and the
// list is empty, as the kernel answers for them.

// xattrHolder reports whether n may hold user attributes.
func xattrHolder(n *Node) bool {
	switch n.Stat.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
		return true
	}
	return false
}

// GetXattr returns the value of n's attribute name; buf, if large enough,
// holds it (it needs max bytes for any value). ENODATA: no such attribute.
func (s *Store) GetXattr(n *Node, name string, buf []byte) ([]byte, error) {
	if !xattrHolder(n) {
		return nil, opErr("getxattr", unix.ENODATA)
	}
	k, err := unix.Getxattr(n.procPath(), name, buf)
	if err != nil {
		return nil, opErr("getxattr", err)
	}
	return buf[:k], nil
}

// XattrFlag is setxattr(2)'s flags: 0, unix.XATTR_CREATE or XATTR_REPLACE.
type XattrFlag int

// SetXattr sets n's attribute name to value (EEXIST with XATTR_CREATE if it
// exists, ENODATA with XATTR_REPLACE if it does not).
func (s *Store) SetXattr(n *Node, name string, value []byte, flag XattrFlag) error {
	if !xattrHolder(n) {
		return opErr("setxattr", unix.EPERM)
	}
	defer s.changed([]*Node{n}) // its ctime moved
	if err := unix.Setxattr(n.procPath(), name, value, int(flag)); err != nil {
		return opErr("setxattr", err)
	}
	return nil
}

// RemoveXattr removes n's attribute name (ENODATA if it has none).
func (s *Store) RemoveXattr(n *Node, name string) error {
	if !xattrHolder(n) {
		return opErr("removexattr", unix.EPERM)
	}
	defer s.changed([]*Node{n})
	if err := unix.Removexattr(n.procPath(), name); err != nil {
		return opErr("removexattr", err)
	}
	return nil
}

// ListXattrs returns the names of n's attributes that start with prefix,
// sorted (so that a position in the list is a stable cookie while the set of
// names does not change).
func (s *Store) ListXattrs(n *Node, prefix string) ([]string, error) {
	if !xattrHolder(n) {
		return nil, nil
	}
	path := n.procPath()
	// The list may grow between asking its size and reading it: ERANGE, ask again.
	for range 8 {
		size, err := unix.Listxattr(path, nil)
		if err != nil {
			return nil, opErr("listxattr", err)
		}
		if size == 0 {
			return nil, nil
		}
		buf := make([]byte, size)
		k, err := unix.Listxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, opErr("listxattr", err)
		}
		var names []string
		for _, name := range strings.Split(string(buf[:k]), "\x00") {
			if name != "" && strings.HasPrefix(name, prefix) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		return names, nil
	}
	return nil, opErr("listxattr", unix.ERANGE)
}
