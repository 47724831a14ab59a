package cachemgr

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
)

// The bases of the names changed offline (offline.go's offBase) are kept
// beside the offline data, in CACHEDIR/offline/bases (a JSON object a line,
// the first line of a name the one that counts), written before the record
// that changes the name (as the log's records, to the kernel at once: they
// survive a kill of the mount), so that a mount killed offline checks its
// log's names as the one that logged them would have (offlinereint.go).
// The file goes once the names are checked under the permits.

// baseLine is one line of the bases file.
type baseLine struct {
	Dir  string `json:"dir"`  // hex handle
	Name string `json:"name"` //
	FH   string `json:"fh"`   // hex handle; "": no such name
	// Ver: the object's version (offBase.ver); absent: not known.
	Ver *cachedir.Base `json:"ver,omitempty"`
	// Kind "attr": the attribute base of the object FH (offlineattr.go's
	// attrBase: Dir and Name its directory and name, Permit the
	// directory whose permit it needs, Ctime its change time); "": a
	// name's base.
	Kind   string     `json:"kind,omitempty"`
	Permit string     `json:"permit,omitempty"`
	Ctime  *nfs3.Time `json:"ctime,omitempty"`
}

func (p *permits) basesPath() string { return filepath.Join(p.offDataDir(), "bases") }

// saveBase appends b to the bases file (p.off.mu held).
func (p *permits) saveBase(b offBase) {
	p.saveLine(baseLine{Dir: hex.EncodeToString(b.dir), Name: b.name, FH: hex.EncodeToString(b.fh), Ver: b.ver})
}

// saveLine appends bl to the bases file (p.off.mu held).
func (p *permits) saveLine(bl baseLine) {
	line, err := json.Marshal(bl)
	if err == nil {
		err = os.MkdirAll(p.offDataDir(), 0o700)
	}
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(p.basesPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	}
	if err == nil {
		_, err = f.Write(append(line, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.sn.FS.Logger().Warn("the bases of the names changed offline (a restart checks them by the server's checks only)", "err", err)
	}
}

// saveAttrBase appends the attribute base b to the bases file (p.off.mu
// held).
func (p *permits) saveAttrBase(b attrBase) {
	ct := b.ctime
	p.saveLine(baseLine{Kind: "attr", Dir: hex.EncodeToString(b.parent), Name: b.name, FH: hex.EncodeToString(b.fh),
		Permit: hex.EncodeToString(b.permit), Ctime: &ct})
}

// loadAttrBase takes in an attribute base's line (p.off.mu held).
func (p *permits) loadAttrBase(bl baseLine) {
	fh, err1 := hex.DecodeString(bl.FH)
	perm, err2 := hex.DecodeString(bl.Permit)
	parent, err3 := hex.DecodeString(bl.Dir)
	if err1 != nil || err2 != nil || err3 != nil || len(fh) == 0 || len(perm) == 0 || bl.Ctime == nil {
		return
	}
	if _, ok := p.off.attr[string(fh)]; ok {
		return
	}
	if p.off.attr == nil {
		p.off.attr = map[string]attrBase{}
	}
	p.off.attr[string(fh)] = attrBase{fh: fh, permit: perm, parent: parent, name: bl.Name, ctime: *bl.Ctime}
}

// loadBases reads the bases a killed mount left.
func (p *permits) loadBases() {
	b, err := os.ReadFile(p.basesPath())
	if err != nil {
		return
	}
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	for _, l := range strings.Split(string(b), "\n") {
		var bl baseLine
		if strings.TrimSpace(l) == "" || json.Unmarshal([]byte(l), &bl) != nil {
			continue // a line torn by a kill
		}
		if bl.Kind == "attr" {
			p.loadAttrBase(bl)
			continue
		}
		if bl.Kind != "" {
			continue
		}
		dir, err1 := hex.DecodeString(bl.Dir)
		fh, err2 := hex.DecodeString(bl.FH)
		if err1 != nil || err2 != nil || len(dir) == 0 {
			continue
		}
		k := offNameKey(snfs1.ObjRef{FH: dir}, bl.Name)
		if p.off.base == nil {
			p.off.base = map[string]offBase{}
		}
		if _, ok := p.off.base[k]; !ok {
			if len(fh) == 0 {
				fh = nil
			}
			p.off.base[k] = offBase{dir: nfs3.FH(dir), name: bl.Name, fh: nfs3.FH(fh), ver: bl.Ver}
		}
	}
}

// dropBases removes the bases file (p.off.mu held).
func (p *permits) dropBases() {
	if err := os.Remove(p.basesPath()); err != nil && !os.IsNotExist(err) {
		p.sn.FS.Logger().Warn("removing the bases of the names changed offline", "err", err)
	}
}
