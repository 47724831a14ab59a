package server

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"snfs/store"
)

// TestReloadAllOrNothing: a reload that cannot be applied as a whole (no
// exports, two lines for one directory, a directory missing after a new one
// was opened) changes nothing, and leaves no export it opened behind in the
// store; one that can reports what it added, removed, changed and kept.
func TestReloadAllOrNothing(t *testing.T) {
	env := newPreambleEnv(t)
	s := env.s
	cfgOf := func(name string) ExportConfig {
		for _, e := range s.table().list {
			if e.st.Path == env.dirs[name] {
				return e.config().cfg
			}
		}
		t.Fatalf("no export %s", name)
		return ExportConfig{}
	}
	rw, ro := cfgOf("rw"), cfgOf("ro")
	before := s.table()
	unchanged := func(what string) {
		t.Helper()
		if s.table() != before {
			t.Fatalf("%s: the export table changed", what)
		}
	}

	if _, err := s.Reload(nil); !errors.Is(err, ErrNoExports) {
		t.Fatalf("reload of nothing: %v, want ErrNoExports", err)
	}
	unchanged("reload of nothing")

	dup := rw
	dup.Path = env.dirs["rw"] + "/."
	if _, err := s.Reload([]ExportConfig{rw, dup}); err == nil {
		t.Fatal("reload with one directory twice: no error")
	}
	unchanged("reload with one directory twice")

	fresh := filepath.Join(filepath.Dir(env.dirs["rw"]), "fresh")
	if err := os.Mkdir(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	added := ExportConfig{Path: fresh, Clients: rw.Clients}
	missing := ExportConfig{Path: fresh + "-missing", Clients: rw.Clients}
	if _, err := s.Reload([]ExportConfig{rw, added, missing}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reload with a missing directory: %v, want ErrNotExist", err)
	}
	unchanged("reload with a missing directory")
	if s.store.Export(store.ExportID(fresh)) != nil {
		t.Fatal("the export opened by the failed reload is still in the store")
	}

	ro2 := ro
	ro2.Clients = slices.Clone(ro.Clients)
	ro2.Clients[0].Opts.Async = true
	rep, err := s.Reload([]ExportConfig{rw, ro2, added})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Added, []string{fresh}) || !slices.Equal(rep.Changed, []string{ro.Path}) || rep.Unchanged != 1 ||
		!slices.Equal(rep.Removed, []string{env.dirs["async"], env.dirs["closed"]}) {
		t.Fatalf("report %+v", rep)
	}
	if !cfgOf("ro").Clients[0].Opts.Async || !s.table().byID[store.ExportID(env.dirs["ro"])].config().async {
		t.Fatal("the changed option is not in force")
	}
	if s.RootHandle(env.dirs["async"]) != nil || s.RootHandle(fresh) == nil {
		t.Fatal("the table does not hold the new exports")
	}
}
