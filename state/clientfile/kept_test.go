package clientfile

import (
	"errors"
	"slices"
	"testing"

	"snfs/state"
)

// Opens kept until recalled (Config.CloseDelay = UntilRecalled,
// docs/protocol.md 10): each case names the rule it checks.
var keptCases = []struct {
	rule  string
	run   func(t *testing.T, f *File) []Action
	want  []ActionKind // the actions of the last event, in order
	check func(f *File) error
}{
	{"the last release of a cached file keeps its open with no deadline (no timer, no CLOSE)",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 1), want("held", f.Held(), 1), want("caching", f.Caching(), true))
		}},
	{"a reopen long after takes the kept open over: no OPEN, the kernel's pages kept",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			if acts := f.TimerFired(t0.Add(1000 * delay)); len(acts) != 0 {
				t.Fatalf("a stray timer fire: %v", acts)
			}
			o, acts := f.OpenBegin(state.Read)
			if !o.Reused || o.Mode != state.Read || !acts[0].Keep {
				t.Fatalf("reopen: %+v %v", o, acts)
			}
			return acts
		},
		[]ActionKind{ActReuse}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Read), 0), want("read opens", f.Opens(state.Read), 1))
		}},
	{"a read open while an application holds a write open shares it: no OPEN, and no CLOSE at its release (ar reads an object file it holds open)",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			o, acts := f.OpenBegin(state.Read)
			if !o.Reused || !o.Shared || o.Mode != state.Write {
				t.Fatalf("a read open beside a write open: %+v %v; want it to share the write open", o, acts)
			}
			if acts := f.Release(t0, o.Mode, false); len(acts) != 0 {
				t.Fatalf("the sharing read open's release: %v; want nothing sent", acts)
			}
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 1), want("write opens", f.Opens(state.Write), 0), want("read opens", f.Opens(state.Read), 0))
		}},
	{"a write reopen of a file kept for reading needs the server: OPEN, the read open stays kept",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			o, acts := f.OpenBegin(state.Write)
			if o.Reused {
				t.Fatalf("write open took a kept read open over: %v", acts)
			}
			return acts
		},
		[]ActionKind{ActSendOpen}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Read), 1), want("opening", f.Opening(), 1))
		}},
	{"a write open granted locally offline beside a kept read open is one the server does not count: its release sends no CLOSE and keeps nothing, the read open stays kept and the file cached",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			o, _ := f.OpenBegin(state.Write)
			r := state.OpenReply{CacheEnabled: true, Version: f.Version()}
			f.OpenAnswered(&o, r, nil)
			if _, acts := f.OpenCached(&o, r, true); len(acts) != 0 {
				t.Fatalf("the local grant's OpenCached: %v", acts)
			}
			f.GrantedLocally(state.Write)
			if r, w, _, _, _, _ := f.ReclaimItem(); r != 1 || w != 0 {
				t.Fatalf("reclaim reports %d readers, %d writers; want the kept read open only", r, w)
			}
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("kept read", f.Kept(state.Read), 1), want("kept write", f.Kept(state.Write), 0),
				want("forgotten", f.Forgotten(state.Write), 0), want("caching", f.Caching(), true), want("version", f.Version(), uint64(7)))
		}},
	{"a write open granted locally offline and given back (its access check failed) sends no CLOSE: the read open stays kept",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			o, _ := f.OpenBegin(state.Write)
			r := state.OpenReply{CacheEnabled: true, Version: f.Version()}
			f.OpenAnswered(&o, r, nil)
			f.OpenCached(&o, r, true)
			f.GrantedLocally(state.Write)
			return f.GrantUndone(state.Write)
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("kept read", f.Kept(state.Read), 1), want("write opens", f.Opens(state.Write), 0),
				want("forgotten", f.Forgotten(state.Write), 0), want("caching", f.Caching(), true))
		}},
	{"kept opens stay one per mode: a release finding one of its mode kept CLOSEs",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			f.Dropped() // the cache file gone: the next open needs an OPEN
			if o, _ := f.OpenBegin(state.Read); o.Reused {
				t.Fatal("an open of a file not cached took a kept open over")
			} else {
				f.OpenAnswered(&o, grant, nil)
				f.OpenCached(&o, grant, true)
			}
			return f.Release(t0, state.Read, false)
		},
		[]ActionKind{ActSendClose}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Read), 1), want("held", f.Held(), 1), want("caching", f.Caching(), true))
		}},
	{"a callback takes the caching while an application has the file open: its last release CLOSEs the kept ones too",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false) // kept read
			opened(t, f, state.Write, grantW)
			if out := answer(serve(f, state.WritebackInvalidate, true)); out != state.OK {
				t.Fatalf("callback answered %v, want CB_OK (an application has the file open)", out)
			}
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{ActSendClose, ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("kept", f.Kept(state.Read), 0))
		}},
	{"a release of a removed file CLOSEs the kept opens too",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			opened(t, f, state.Write, grantW)
			f.Removed()
			return f.Release(t0, state.Write, true)
		},
		[]ActionKind{ActSendClose, ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error { return want("held", f.Held(), 0) }},
	{"another client's open: write-back, then CB_TREAT_AS_CLOSED; the kept open forgotten, never CLOSEd",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			acts := serve(f, state.WritebackInvalidate, true)
			if out := answer(acts); out != state.TreatAsClosed {
				t.Fatalf("answered %v, want CB_TREAT_AS_CLOSED", out)
			}
			if more := f.CloseAllDelayed(); len(more) != 0 {
				t.Fatalf("kept opens CLOSEd after CB_TREAT_AS_CLOSED: %v", more)
			}
			if o, _ := f.OpenBegin(state.Read); o.Reused {
				t.Fatal("a reopen after CB_TREAT_AS_CLOSED took no OPEN")
			}
			return acts
		},
		[]ActionKind{ActStopCaching, ActWriteBack, ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActWriteBack,
			ActInvalidateAttr, ActNotifyAttr, ActAnswer},
		func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 0), want("dirty", f.Dirty(), false))
		}},
	{"CB_RELINQUISH (the server's table filling): write-back, CB_TREAT_AS_CLOSED",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			return serve(f, state.Relinquish, true)
		},
		[]ActionKind{ActWriteBack, ActWriteBack, ActInvalidateAttr, ActNotifyAttr, ActAnswer},
		func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("caching", f.Caching(), false))
		}},
	{"given back (the client's bound, eviction, unmount): CLOSE, dirty as the cache is",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			acts := f.CloseAllDelayed()
			if !acts[0].Dirty || acts[0].Mode != state.Write {
				t.Fatalf("CLOSE: %v", acts[0])
			}
			return acts
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error { return want("held", f.Held(), 0) }},
	{"a server restart, reclaimed: the kept open is reported and stays kept",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			r, w, caching, dirty, v, ok := f.ReclaimItem()
			if !ok || r != 0 || w != 1 || !caching || !dirty || v != 8 {
				t.Fatalf("reclaim item: r %d w %d caching %v dirty %v version %d ok %v", r, w, caching, dirty, v, ok)
			}
			return f.ServerRestarted(false)
		},
		[]ActionKind{ActWriteBack}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 1), want("caching", f.Caching(), true))
		}},
	{"a server restart, reclaim refused: the kept open is forgotten (no CLOSE), dirty data reintegrated",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			f.ReclaimItem()
			acts := f.ServerRestarted(true)
			if more := f.CloseAllDelayed(); len(more) != 0 {
				t.Fatalf("kept opens CLOSEd after a refused reclaim: %v", more)
			}
			return acts
		},
		[]ActionKind{ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActReintegrate},
		func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("caching", f.Caching(), false))
		}},
	{"an open of a mode the file is open in already shares that open: no OPEN, and no CLOSE at its release",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			o, acts := f.OpenBegin(state.Read)
			if !o.Reused || !o.Shared || !has(acts, ActReuse) {
				t.Fatalf("second read open: %+v %v", o, acts)
			}
			if acts := f.Release(t0, state.Read, false); len(acts) != 0 {
				t.Fatalf("release of the shared open: %v", acts)
			}
			if f.Opens(state.Read) != 1 || f.Held() != 1 {
				t.Fatalf("after the shared release: opens %d held %d", f.Opens(state.Read), f.Held())
			}
			return f.Release(t0, state.Read, false)
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Read), 1), want("opens", f.Opens(state.Read), 0))
		}},
	{"a write open of a file open only for reading is not shared: OPEN_WRITE",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			_, acts := f.OpenBegin(state.Write)
			return acts
		},
		[]ActionKind{ActSendOpen}, nil},
	{"an application open that fails after its OPEN while another shares it: no CLOSE, the sharer keeps it",
		func(t *testing.T, f *File) []Action {
			o, _ := f.OpenBegin(state.Write)
			f.OpenAnswered(&o, grantW, nil)
			f.OpenCached(&o, grantW, true)
			if o2, _ := f.OpenBegin(state.Write); !o2.Shared {
				t.Fatal("not shared")
			}
			if acts := f.OpenUndone(state.Write); len(acts) != 0 {
				t.Fatalf("undone: %v", acts)
			}
			acts := f.Release(t0, state.Write, false)
			if f.Kept(state.Write) != 1 {
				t.Fatalf("the sharer's release did not keep the open: %v", acts)
			}
			return acts
		},
		[]ActionKind{}, func(f *File) error { return want("held", f.Held(), 1) }},
	{"no sharing of an open of a file not cached: OPEN",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, noCache)
			_, acts := f.OpenBegin(state.Read)
			return acts
		},
		[]ActionKind{ActSendOpen}, nil},
	{"fenced: the kept open is forgotten (no CLOSE, no reuse)",
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			acts := f.Fenced()
			if more := f.CloseAllDelayed(); len(more) != 0 {
				t.Fatalf("kept opens CLOSEd after a fence: %v", more)
			}
			if o, _ := f.OpenBegin(state.Read); o.Reused {
				t.Fatal("a reopen after a fence took no OPEN")
			}
			return acts
		},
		[]ActionKind{ActInvalidateAttr, ActInvalidateCache, ActNotifyData}, func(f *File) error { return want("kept", f.Kept(state.Read), 0) }},
}

func TestKeptUntilRecalled(t *testing.T) {
	for _, c := range keptCases {
		t.Run(c.rule, func(t *testing.T) {
			f := New(Config{CloseDelay: UntilRecalled})
			f.CacheAttached()
			acts := c.run(t, f)
			if c.want != nil && !slices.Equal(kinds(acts), c.want) && !(len(c.want) == 0 && len(acts) == 0) {
				t.Errorf("actions %v, want %v", acts, c.want)
			}
			if c.check != nil {
				if err := c.check(f); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestFencedForgetsKeptTimed: with a deadline too, a fence forgets the kept
// opens and stops their timer.
func TestFencedForgetsKeptTimed(t *testing.T) {
	f := New(Config{CloseDelay: delay})
	opened(t, f, state.Read, grant)
	f.Release(t0, state.Read, false)
	acts := f.Fenced()
	if !has(acts, ActStopTimer) || f.Held() != 0 {
		t.Fatalf("fenced: %v, held %d", acts, f.Held())
	}
	if more := f.TimerFired(t0.Add(delay)); len(more) != 0 {
		t.Fatalf("timer after a fence: %v", more)
	}
}
