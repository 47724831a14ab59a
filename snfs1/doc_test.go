package snfs1

import (
	"encoding/binary"
	"snfs/state"

	"os"
	"regexp"
	"snfs/xdr"
	"strconv"
	"strings"
	"testing"
)

// TestDocNumbers: every constant, enum value and procedure number that the
// XDR of docs/protocol.md section 3 gives is this package's, and every value
// this package decodes has its name there (CB_PINNED had none). A client
// written from the document alone speaks the same numbers as this server.
func TestDocNumbers(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), "## 3. Programs and XDR")
	end := strings.Index(string(doc), "## 4. Server procedures")
	if start < 0 || end < start {
		t.Fatal("docs/protocol.md has no section 3")
	}
	xdrText := string(doc[start:end])
	got := map[string]uint64{}
	// "const NAME = 12;", "NAME = 1," in an enum, "... SNFSPROC1_NAME(args) = 3;"
	re := regexp.MustCompile(`(?m)^\s*(?:const\s+)?([A-Z][A-Z0-9_]*)(?:\([A-Za-z0-9_]*\))?\s*=\s*(0x[0-9A-Fa-f]+|[0-9]+)\s*[;,]?`)
	for _, m := range re.FindAllStringSubmatch(xdrText, -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		got[m[1]] = v
	}
	procs := regexp.MustCompile(`(?m)\s(SNFS(?:CB)?PROC1_[A-Z_]+)\([A-Za-z0-9_]*\)\s*=\s*([0-9]+);`)
	for _, m := range procs.FindAllStringSubmatch(xdrText, -1) {
		v, _ := strconv.ParseUint(m[2], 10, 64)
		got[m[1]] = v
	}
	want := map[string]uint64{
		"SNFS_PROGRAM": Program, "SNFS_V1": Version, "SNFS_CB_PROGRAM": CBProgram, "SNFS_CB_V1": CBVersion,
		"SNFS_NAMELEN": NameLen, "SNFS_VERIFIERSIZE": VerfSize, "SNFS_RECLAIM_MAX": ReclaimMax, "SNFS_APPEND_MAX": AppendMax,
		"SNFS_DIR_RELEASE_MAX": DirReleaseMax, "SNFS_PERMIT_RELEASE_MAX": PermitReleaseMax, "SNFS_RECLAIM_PERMIT_MAX": ReclaimPermitMax, "SNFS_REINTEGRATE_MAX": ReintegrateMax,
		"SNFS_REINTEGRATE_DIRS_MAX": ReintegrateDirsMax, "SNFS_STORE_MAX": StoreMax, "SNFS_REINTEGRATE_STORE_MAX": ReintegrateStoreMax,
		"SNFS_ERR_NOPERMIT": uint64(ErrNoPermit), "CB_RECALL_PERMIT": uint64(state.RecallPermit),
		"CML_CREATE": uint64(CMLCreate), "CML_MKDIR": uint64(CMLMkdir), "CML_SYMLINK": uint64(CMLSymlink), "CML_LINK": uint64(CMLLink),
		"CML_UNLINK": uint64(CMLUnlink), "CML_RMDIR": uint64(CMLRmdir), "CML_RENAME": uint64(CMLRename), "CML_SETATTR": uint64(CMLSetattr),
		"CML_CREATE_OPEN": uint64(CMLCreateOpen), "CML_STORE": uint64(CMLStore),
		"SNFS1_OK": 0, "SNFS_ERR_STALE_CLIENTID": uint64(ErrStaleClientID), "SNFS_ERR_FENCED": uint64(ErrFenced),
		"SNFS_ERR_NOGRACE": uint64(ErrNoGrace),
		"OPEN_READ":        uint64(state.Read), "OPEN_WRITE": uint64(state.Write),
		"CB_WRITEBACK": uint64(state.Writeback), "CB_INVALIDATE": uint64(state.Invalidate),
		"CB_WRITEBACK_INVALIDATE": uint64(state.WritebackInvalidate), "CB_RELINQUISH": uint64(state.Relinquish),
		"CB_RECALL_LOCKS": uint64(state.RecallLocks),
		"CB_OK":           uint64(state.OK), "CB_TREAT_AS_CLOSED": uint64(state.TreatAsClosed), "CB_STALE": uint64(state.Stale),
		"ALLOC_ALLOCATE": uint64(Allocate), "ALLOC_KEEP_SIZE": uint64(AllocateKeepSize), "ALLOC_DEALLOCATE": uint64(Deallocate),
		"SNFS_XATTR_NAMEMAX": XattrNameMax, "SNFS_XATTR_SIZEMAX": XattrSizeMax, "SNFS_XATTR_LISTMAX": XattrListMax,
		"SNFS_ERR_NOXATTR": uint64(ErrNoXattr), "SNFS_ERR_XATTR2BIG": uint64(ErrXattr2Big),
		"SETXATTR1_EITHER": uint64(XattrEither), "SETXATTR1_CREATE": uint64(XattrCreate), "SETXATTR1_REPLACE": uint64(XattrReplace),
		"CB_PINNED":        uint64(state.Pinned),
		"SNFSCBPROC1_NULL": CBProcNull, "SNFSCBPROC1_CALLBACK": CBProcCallback, "SNFSCBPROC1_GRANTED": CBProcGranted,
		"LOCK_READ": uint64(LockRead), "LOCK_WRITE": uint64(LockWrite),
		"LOCK_GRANTED": uint64(LockGranted), "LOCK_DENIED": uint64(LockDenied), "LOCK_BLOCKED": uint64(LockBlocked),
		"LOCK_DEADLOCK": uint64(LockDeadlock), "LOCK_GRACE": uint64(LockGrace), "LOCK_NOLOCKS": uint64(LockNoLocks),
		"GRANTED_OK": uint64(GrantedOK), "GRANTED_UNWANTED": uint64(GrantedUnwanted),
		"NFS3_FHSIZE": 64,
	}
	for i, name := range ProcNames {
		if name == "" { // a number assigned on another branch
			continue
		}
		want["SNFSPROC1_"+name] = uint64(i)
	}
	for name, v := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("docs/protocol.md section 3 does not define %s (= %d)", name, v)
		case g != v:
			t.Errorf("docs/protocol.md section 3: %s = %d, this implementation: %d", name, g, v)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/protocol.md section 3 defines %s = %d, unknown to this test", name, g)
		}
	}
	// Every cbstat1 value the decoder accepts is named.
	for s := state.OK; ; s++ {
		var res CallbackRes
		if res.Decode(readerOf(uint32(s))) != nil {
			break
		}
		if !strings.Contains(xdrText, "CB_"+s.String()) {
			t.Errorf("cbstat1 %d (%s) decodes but docs/protocol.md section 3 does not name it", s, s)
		}
	}
	// Every allocmode1 value the decoder accepts is named.
	for m := Allocate; m <= Deallocate+1; m++ {
		var a AllocateArgs
		var w xdr.Writer
		w.Opaque([]byte{1})
		w.Uint32(uint32(m))
		w.Uint64(0)
		w.Uint64(1)
		if a.Decode(xdr.NewReader(w.Bytes())) != nil {
			if m <= Deallocate {
				t.Errorf("allocmode1 %d does not decode", m)
			}
			continue
		}
		if !strings.Contains(xdrText, m.String()) {
			t.Errorf("allocmode1 %d (%s) decodes but docs/protocol.md section 3 does not name it", m, m)
		}
	}
}

func readerOf(v uint32) *xdr.Reader {
	return xdr.NewReader(binary.BigEndian.AppendUint32(nil, v))
}
