// Package mount3 holds the MOUNT version 3 protocol of RFC 1813 appendix I: constants
// and the XDR types of its six procedures, encoded and decoded by the same code on the
// server and on the client. Decoders are bounded (paths MNTPATHLEN, names MNTNAMLEN,
// lists MaxList). It must not touch a file system or a socket.
package mount3

import (
	"fmt"

	"snfs/xdr"
)

// Program, version, procedures and limits (RFC 1813 section 5.1).
const (
	Program = 100005
	Version = 3

	ProcNull    = 0
	ProcMnt     = 1
	ProcDump    = 2
	ProcUmnt    = 3
	ProcUmntall = 4
	ProcExport  = 5
	NumProcs    = 6

	PathLen = 1024 // MNTPATHLEN
	NameLen = 255  // MNTNAMLEN
	FHSize  = 64   // FHSIZE3
	MaxList = 65536
)

// ProcNames are the procedure names as in the RFC.
var ProcNames = [NumProcs]string{"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"}

// Status is mountstat3.
type Status uint32

// mountstat3 values.
const (
	OK             Status = 0
	ErrPerm        Status = 1
	ErrNoEnt       Status = 2
	ErrIO          Status = 5
	ErrAcces       Status = 13
	ErrNotDir      Status = 20
	ErrInval       Status = 22
	ErrNameTooLong Status = 63
	ErrNotSupp     Status = 10004
	ErrServerFault Status = 10006
)

func (s Status) Error() string {
	switch s {
	case OK:
		return "MNT3_OK"
	case ErrPerm:
		return "MNT3ERR_PERM"
	case ErrNoEnt:
		return "MNT3ERR_NOENT"
	case ErrIO:
		return "MNT3ERR_IO"
	case ErrAcces:
		return "MNT3ERR_ACCES"
	case ErrNotDir:
		return "MNT3ERR_NOTDIR"
	case ErrInval:
		return "MNT3ERR_INVAL"
	case ErrNameTooLong:
		return "MNT3ERR_NAMETOOLONG"
	case ErrNotSupp:
		return "MNT3ERR_NOTSUPP"
	case ErrServerFault:
		return "MNT3ERR_SERVERFAULT"
	}
	return fmt.Sprintf("mountstat3(%d)", uint32(s))
}

// DirPath is the argument of MNT and UMNT.
type DirPath struct{ Path string }

// Encode implements xdr.Encoder.
func (d *DirPath) Encode(w *xdr.Writer) { w.String(d.Path) }

// Decode implements xdr.Decoder.
func (d *DirPath) Decode(r *xdr.Reader) error { d.Path = r.String(PathLen); return r.Err() }

// MntRes is mountres3 (section 5.2.1, MNT).
type MntRes struct {
	Status      Status
	FH          []byte   // when OK
	AuthFlavors []uint32 // when OK
}

// Encode implements xdr.Encoder.
func (x *MntRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == OK {
		w.Opaque(x.FH)
		w.Uint32(uint32(len(x.AuthFlavors)))
		for _, f := range x.AuthFlavors {
			w.Uint32(f)
		}
	}
}

// Decode implements xdr.Decoder.
func (x *MntRes) Decode(r *xdr.Reader) error {
	if x.Status = Status(r.Uint32()); x.Status == OK {
		x.FH = append([]byte(nil), r.Opaque(FHSize)...)
		n := r.ArrayLen(64, 4)
		x.AuthFlavors = make([]uint32, n)
		for i := range x.AuthFlavors {
			x.AuthFlavors[i] = r.Uint32()
		}
	}
	return r.Err()
}

// MountBody is one entry of a mountlist (section 5.2.2, DUMP).
type MountBody struct {
	Hostname  string
	Directory string
}

// MountList is the result of DUMP.
type MountList []MountBody

// Encode implements xdr.Encoder.
func (m MountList) Encode(w *xdr.Writer) {
	for _, b := range m {
		w.Bool(true)
		w.String(b.Hostname)
		w.String(b.Directory)
	}
	w.Bool(false)
}

// Decode implements xdr.Decoder.
func (m *MountList) Decode(r *xdr.Reader) error {
	*m = (*m)[:0]
	for r.Bool() && len(*m) < MaxList {
		*m = append(*m, MountBody{r.String(NameLen), r.String(PathLen)})
	}
	return r.Err()
}

// ExportNode is one entry of an exports list (section 5.2.5, EXPORT).
type ExportNode struct {
	Dir    string
	Groups []string
}

// Exports is the result of EXPORT.
type Exports []ExportNode

// Encode implements xdr.Encoder.
func (e Exports) Encode(w *xdr.Writer) {
	for _, n := range e {
		w.Bool(true)
		w.String(n.Dir)
		for _, g := range n.Groups {
			w.Bool(true)
			w.String(g)
		}
		w.Bool(false)
	}
	w.Bool(false)
}

// Decode implements xdr.Decoder.
func (e *Exports) Decode(r *xdr.Reader) error {
	*e = (*e)[:0]
	for r.Bool() && len(*e) < MaxList {
		n := ExportNode{Dir: r.String(PathLen)}
		for r.Bool() && len(n.Groups) < MaxList {
			n.Groups = append(n.Groups, r.String(NameLen))
		}
		*e = append(*e, n)
	}
	return r.Err()
}
