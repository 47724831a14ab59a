package cachemgr

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
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
// survive a kill of the mount; flushed before the log is, syncLog: they
// survive a crash of the machine that the log's records survive), so that a mount killed offline checks its
// log's names as the one that logged them would have (offlinereint.go).
//
// Once the names are checked under the permits, the file is replaced by
// what the check found (saveChecked): the names it poisoned, the attribute
// bases it checked, and a "checked" line; a record refused later poisons
// its names there too. A mount killed before the whole log is on the
// server so keeps, at its restart, the records the check refused as
// conflicts: without the file they would be sent, over another's change
// (the bases themselves cannot be checked again: the records sent since
// changed those names). The file goes once the whole log is in (offDone),
// or at a start that finds the log empty (openPermits: a kill before offDone).

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
	//
	// Kind "poison": Key (hex) is a name or object the check (or a refused
	// record since) poisoned (offLog.poison), "unpoison" one a record
	// applied since made again (unpoisonMade); "attrchecked": an attribute
	// base the check took (offLog.attrChecked); "checked": the names were
	// checked, the lines before it are what the check found.
	Kind   string     `json:"kind,omitempty"`
	Permit string     `json:"permit,omitempty"`
	Ctime  *nfs3.Time `json:"ctime,omitempty"`
	Key    string     `json:"key,omitempty"`
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
		err = p.writeBases(os.O_APPEND, append(line, '\n'))
	}
	if err != nil {
		p.sn.FS.Logger().Warn("the bases of the names changed offline (a restart checks them by the server's checks only)", "err", err)
	}
}

// writeBases appends b to the bases file (flag os.O_APPEND), or replaces
// the file by one holding b (flag 0: a new file renamed over it, so that a
// kill leaves the old one or the new one whole).
func (p *permits) writeBases(flag int, b []byte) error {
	if err := os.MkdirAll(p.offDataDir(), 0o700); err != nil {
		return err
	}
	name := p.basesPath()
	if flag == 0 {
		name += ".new"
		flag = os.O_TRUNC
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|flag, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && name != p.basesPath() {
		err = syncBasesFile(f) // whole before it replaces the old one
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && name != p.basesPath() {
		if err = os.Rename(name, p.basesPath()); err == nil {
			err = syncDirOf(name)
		}
	}
	if err == nil && flag == os.O_APPEND {
		p.basesDirty.Store(true)
	}
	return err
}

// syncBasesFile flushes the bases file (a variable: tests count the flushes).
var syncBasesFile = (*os.File).Sync

// syncLog flushes the bases file, if written since its last flush, then the
// log: a base reaches the disk no later than the record it is the base of
// (the record is written after it; an unflushed write may still reach the
// disk before an earlier one, as offSync's data and log may).
func (p *permits) syncLog() error {
	if p.basesDirty.Swap(false) {
		if err := p.syncBases(); err != nil {
			p.basesDirty.Store(true)
			return err
		}
	}
	return p.log.Sync()
}

// syncBases flushes the bases file and its name. A file already gone (the
// log all in, offDone) needs nothing.
func (p *permits) syncBases() error {
	f, err := os.Open(p.basesPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = syncBasesFile(f)
	f.Close()
	if err == nil {
		err = syncDirOf(p.basesPath())
	}
	return err
}

// saveChecked replaces the bases file by what the check of the names
// found (p.off.mu held, the bases checked): the poisoned names, the
// attribute bases checked, a "checked" line.
func (p *permits) saveChecked() {
	var b []byte
	add := func(bl baseLine) {
		if line, err := json.Marshal(bl); err == nil {
			b = append(append(b, line...), '\n')
		}
	}
	for k := range p.off.poison {
		add(baseLine{Kind: "poison", Key: hex.EncodeToString([]byte(k))})
	}
	for _, ob := range p.off.base { // noted during the check: not checked yet
		add(baseLine{Dir: hex.EncodeToString(ob.dir), Name: ob.name, FH: hex.EncodeToString(ob.fh), Ver: ob.ver})
	}
	for _, a := range p.off.attr {
		ct := a.ctime
		add(baseLine{Kind: "attr", Dir: hex.EncodeToString(a.parent), Name: a.name, FH: hex.EncodeToString(a.fh),
			Permit: hex.EncodeToString(a.permit), Ctime: &ct})
	}
	for _, a := range p.off.attrChecked {
		ct := a.ctime
		add(baseLine{Kind: "attrchecked", Dir: hex.EncodeToString(a.parent), Name: a.name, FH: hex.EncodeToString(a.fh),
			Permit: hex.EncodeToString(a.permit), Ctime: &ct})
	}
	add(baseLine{Kind: "checked"})
	if err := p.writeBases(0, b); err != nil {
		p.sn.FS.Logger().Warn("saving what the check of the names changed offline found (a restart would send what it refused)", "err", err)
		return
	}
	p.off.durable = true
}

// saveAttrBase appends the attribute base b to the bases file (p.off.mu
// held).
func (p *permits) saveAttrBase(b attrBase) {
	ct := b.ctime
	p.saveLine(baseLine{Kind: "attr", Dir: hex.EncodeToString(b.parent), Name: b.name, FH: hex.EncodeToString(b.fh),
		Permit: hex.EncodeToString(b.permit), Ctime: &ct})
}

// loadAttrBase takes in an attribute base's line (p.off.mu held): into
// p.off.attr, or p.off.attrChecked for a line of kind "attrchecked".
func (p *permits) loadAttrBase(bl baseLine) {
	fh, err1 := hex.DecodeString(bl.FH)
	perm, err2 := hex.DecodeString(bl.Permit)
	parent, err3 := hex.DecodeString(bl.Dir)
	if err1 != nil || err2 != nil || err3 != nil || len(fh) == 0 || len(perm) == 0 || bl.Ctime == nil {
		return
	}
	m := &p.off.attr
	if bl.Kind == "attrchecked" {
		m = &p.off.attrChecked
	}
	if _, ok := (*m)[string(fh)]; ok {
		return
	}
	if *m == nil {
		*m = map[string]attrBase{}
	}
	(*m)[string(fh)] = attrBase{fh: fh, permit: perm, parent: parent, name: bl.Name, ctime: *bl.Ctime}
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
		switch bl.Kind {
		case "attr", "attrchecked":
			p.loadAttrBase(bl)
			continue
		case "poison":
			if k, err := hex.DecodeString(bl.Key); err == nil && len(k) > 0 {
				if p.off.poison == nil {
					p.off.poison = map[string]bool{}
				}
				p.off.poison[string(k)] = true
			}
			continue
		case "unpoison":
			if k, err := hex.DecodeString(bl.Key); err == nil {
				delete(p.off.poison, string(k))
			}
			continue
		case "checked":
			p.off.durable = true
			continue
		case "":
		default:
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
	p.off.durable = false
	if err := os.Remove(p.basesPath()); err != nil && !os.IsNotExist(err) {
		p.sn.FS.Logger().Warn("removing the bases of the names changed offline", "err", err)
	}
}
