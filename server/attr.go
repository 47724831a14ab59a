package server

import (
	"golang.org/x/sys/unix"

	"snfs/nfs3"
)

func nfsTime(t unix.Timespec) nfs3.Time { return nfs3.Time{Sec: uint32(t.Sec), Nsec: uint32(t.Nsec)} }

func ftype(mode uint32) nfs3.FType {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return nfs3.TypeDir
	case unix.S_IFLNK:
		return nfs3.TypeLnk
	case unix.S_IFBLK:
		return nfs3.TypeBlk
	case unix.S_IFCHR:
		return nfs3.TypeChr
	case unix.S_IFSOCK:
		return nfs3.TypeSock
	case unix.S_IFIFO:
		return nfs3.TypeFifo
	}
	return nfs3.TypeReg
}

// fattr converts kernel attributes to fattr3; fsid identifies the export.
func fattr(st *unix.Stat_t, fsid uint32) *nfs3.Fattr {
	return &nfs3.Fattr{
		Type:   ftype(st.Mode),
		Mode:   st.Mode & 0o7777,
		Nlink:  uint32(st.Nlink),
		UID:    st.Uid,
		GID:    st.Gid,
		Size:   uint64(st.Size),
		Used:   uint64(st.Blocks) * 512,
		Rdev:   nfs3.SpecData{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)},
		FSID:   uint64(fsid),
		FileID: st.Ino,
		Atime:  nfsTime(st.Atim),
		Mtime:  nfsTime(st.Mtim),
		Ctime:  nfsTime(st.Ctim),
	}
}

func wccAttr(st *unix.Stat_t) *nfs3.WccAttr {
	return &nfs3.WccAttr{Size: uint64(st.Size), Mtime: nfsTime(st.Mtim), Ctime: nfsTime(st.Ctim)}
}
