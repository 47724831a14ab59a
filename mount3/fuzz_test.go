package mount3

import (
	"testing"

	"snfs/xdr"
)

// FuzzDecoders: MNT/UMNT arguments and every MOUNT result decoder are bounded and
// never panic; the first byte picks the type.
func FuzzDecoders(f *testing.F) {
	var w xdr.Writer
	(&DirPath{Path: "/srv/x"}).Encode(&w)
	f.Add(append([]byte{0}, w.Bytes()...))
	w.Reset()
	(&MntRes{FH: []byte{1, 2, 3}, AuthFlavors: []uint32{1}}).Encode(&w)
	f.Add(append([]byte{1}, w.Bytes()...))
	w.Reset()
	Exports{{Dir: "/a", Groups: []string{"*"}}}.Encode(&w)
	f.Add(append([]byte{3}, w.Bytes()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		r := xdr.NewReader(b[1:])
		switch b[0] % 4 {
		case 0:
			var d DirPath
			if d.Decode(r) == nil && len(d.Path) > PathLen {
				t.Fatal("path over MNTPATHLEN")
			}
		case 1:
			var m MntRes
			if m.Decode(r) == nil && len(m.FH) > FHSize {
				t.Fatal("handle over FHSIZE3")
			}
		case 2:
			var l MountList
			l.Decode(r)
		case 3:
			var e Exports
			e.Decode(r)
		}
	})
}
