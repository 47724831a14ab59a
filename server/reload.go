package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"snfs/gather"
	"snfs/store"
)

// ErrNoExports is Reload's error for an empty set of exports: a reload never
// leaves the server exporting nothing (docs/serve.md, "Reloading the exports").
var ErrNoExports = errors.New("nothing to export")

// ReloadReport says what a Reload changed: the exports' paths as configured.
type ReloadReport struct {
	Added, Removed, Changed []string
	Unchanged               int
}

// table returns the exports in service now.
func (s *Server) table() *exportTable { return s.exports.Load() }

// exportDir is the directory ec exports: absolute, symlinks resolved (the
// store's export path, whose hash is the export id in every handle).
func exportDir(ec ExportConfig) (string, error) {
	p, err := filepath.EvalSymlinks(ec.Path)
	if err != nil {
		return "", fmt.Errorf("server: export %s: %w", ec.Path, err)
	}
	return filepath.Abs(p)
}

// openExport opens directory p as export ec in the store.
func (s *Server) openExport(ec ExportConfig, p string) (*export, error) {
	se, err := s.store.AddExport(p)
	if err != nil {
		return nil, err
	}
	e := &export{st: se}
	e.setConfig(ec)
	if s.metrics != nil {
		e.metrics = s.metrics.Export(ec.Path)
	}
	gc := s.gatherCfg
	gc.Observe = func(st gather.Stats) { s.observeGather(e, st) }
	e.gather = gather.New(gc)
	return e, nil
}

// add puts e, configured as ec over directory p, in the table.
func (t *exportTable) add(e *export, ec ExportConfig, p string) {
	t.list = append(t.list, e)
	t.byID[e.st.ID] = e
	t.byPath[ec.Path] = e
	t.byPath[p] = e
}

// Reload replaces the exports in service with exports, as `exportfs -r` does,
// without stopping the service or closing a connection. An export whose
// directory was exported before keeps its state (its handles, its write
// gathering) and takes its new client list and options for the next call; a
// new one is mountable when Reload returns. The files of a removed or changed
// one are first written back by the protocol clients that may hold dirty
// blocks of them (called back, waited for until their callback deadline).
// Then a removed one's handles are answered NFS3ERR_STALE (MNT of it
// MNT3ERR_NOENT), its file system is flushed, and the clients that cached its
// files meanwhile are called back again (docs/protocol.md section 7.2).
// Reload is all or nothing: on an error (a directory that cannot be exported,
// none at all) the exports in service stay as they were. Each change is
// logged.
func (s *Server) Reload(exports []ExportConfig) (ReloadReport, error) {
	var rep ReloadReport
	if len(exports) == 0 {
		return rep, ErrNoExports
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.table()
	byDir := make(map[string]*export, len(old.list))
	for _, e := range old.list {
		byDir[e.st.Path] = e
	}
	dirs := make([]string, len(exports))
	seen := map[string]string{}
	for i, ec := range exports {
		p, err := exportDir(ec)
		if err != nil {
			return rep, err
		}
		if first, dup := seen[p]; dup {
			return rep, fmt.Errorf("server: exports %s and %s are the same directory", first, ec.Path)
		}
		seen[p] = ec.Path
		dirs[i] = p
	}
	tab := &exportTable{byID: map[uint32]*export{}, byPath: map[string]*export{}}
	var added []*export
	kept := map[*export]ExportConfig{}
	for i, ec := range exports {
		e := byDir[dirs[i]]
		if e == nil {
			var err error
			if e, err = s.openExport(ec, dirs[i]); err != nil {
				for _, a := range added {
					s.store.RemoveExport(a.st)
				}
				return rep, err
			}
			added = append(added, e)
			rep.Added = append(rep.Added, ec.Path)
		} else {
			kept[e] = ec
		}
		tab.add(e, ec, dirs[i])
	}
	var gone []*export
	for _, e := range old.list {
		if _, ok := kept[e]; !ok {
			gone = append(gone, e)
		}
	}
	var changed []*export
	for e, ec := range kept {
		if !sameConfig(e.config().cfg, ec) {
			changed = append(changed, e)
		}
	}
	ids := make(map[uint32]bool, len(gone))
	for _, e := range gone {
		ids[e.st.ID] = true
	}
	inGone := func(fh []byte) bool {
		id, ok := store.HandleExportID(fh)
		return ok && ids[id]
	}
	if len(gone)+len(changed) > 0 {
		// Clients' delayed writes reach the files while they are still
		// served, and under the options they were made under: each caching
		// client of a removed or changed export is called back and answers
		// once written back, or is fenced at its callback deadline.
		touched := make(map[uint32]bool, len(gone)+len(changed))
		for _, e := range append(gone, changed...) {
			touched[e.st.ID] = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.consist.CallbackTimeout()+time.Second)
		err := s.consist.WriteBackWhere(ctx, func(fh []byte) bool {
			id, ok := store.HandleExportID(fh)
			return ok && touched[id]
		})
		cancel()
		if err != nil {
			s.log.Warn("exports reload: applied although clients have not written back", "err", err)
		}
	}
	for e, ec := range kept {
		if was := e.config().cfg; !sameConfig(was, ec) {
			s.log.Info("export changed: applies to the next call", "path", ec.Path,
				"was", was.Rules(), "now", ec.Rules())
			rep.Changed = append(rep.Changed, ec.Path)
			e.setConfig(ec)
		} else {
			rep.Unchanged++
		}
	}
	s.exports.Store(tab)
	for _, e := range added {
		s.log.Info("export added", "path", e.config().cfg.Path, "clients", e.config().cfg.Rules())
	}
	for _, e := range gone {
		path := e.config().cfg.Path
		rep.Removed = append(rep.Removed, path)
		// Data written UNSTABLE and not yet committed is on disk all the
		// same; the client's COMMIT is answered NFS3ERR_STALE.
		if err := s.store.SyncExport(e.st); err != nil {
			s.log.Error("export removed: flushing its file system failed", "path", path, "err", err)
		}
		s.store.RemoveExport(e.st)
		s.log.Info("export removed: its handles are stale from now on", "path", path)
	}
	if len(gone) > 0 {
		// Whatever a client cached since the write-back above.
		s.consist.ChangedWhere(inGone)
	}
	slices.Sort(rep.Changed)
	return rep, nil
}

// sameConfig reports whether a and b export the same path to the same
// clients with the same options.
func sameConfig(a, b ExportConfig) bool {
	return a.Path == b.Path && slices.EqualFunc(a.Clients, b.Clients, func(x, y ClientRule) bool {
		return x.Spec == y.Spec && x.Opts == y.Opts
	})
}

// Rules is the client list as an exports(5) line writes it, every option
// spelled out: 127.0.0.1(rw,no_root_squash,...) *(ro,...).
func (ec ExportConfig) Rules() string {
	parts := make([]string, len(ec.Clients))
	for i, r := range ec.Clients {
		parts[i] = r.Spec + "(" + r.Opts.String() + ")"
	}
	return strings.Join(parts, " ")
}

// String writes o as exports(5) options.
func (o Options) String() string {
	pick := func(b bool, yes, no string) string {
		if b {
			return yes
		}
		return no
	}
	return strings.Join([]string{pick(o.ReadOnly, "ro", "rw"), pick(o.RootSquash, "root_squash", "no_root_squash"),
		pick(o.AllSquash, "all_squash", "no_all_squash"), pick(o.Async, "async", "sync"),
		pick(o.Secure, "secure", "insecure"), fmt.Sprintf("anonuid=%d,anongid=%d", o.AnonUID, o.AnonGID)}, ",")
}
