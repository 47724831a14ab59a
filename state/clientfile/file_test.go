package clientfile

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"snfs/state"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const delay = 3 * time.Second

var (
	grant   = state.OpenReply{CacheEnabled: true, Version: 7, OldVersion: 7}
	grantW  = state.OpenReply{CacheEnabled: true, Version: 8, OldVersion: 7}
	noCache = state.OpenReply{CacheEnabled: false, Version: 9, OldVersion: 9}
)

// opened runs an application open answered r (settled), as the driver
// would, and returns the actions of the answer.
func opened(t *testing.T, f *File, mode state.Mode, r state.OpenReply) []Action {
	t.Helper()
	o, acts := f.OpenBegin(mode)
	if o.Reused {
		return acts
	}
	if !has(acts, ActSendOpen) {
		t.Fatalf("open: %v, want an OPEN", acts)
	}
	acts = f.OpenAnswered(&o, r, nil)
	if has(acts, ActCache) {
		_, more := f.OpenCached(&o, r, true)
		acts = append(acts, more...)
	}
	return acts
}

// serve runs a callback to its answer, every write-back succeeding (and
// writing the dirty data back), and returns all its actions.
func serve(f *File, mode state.CallbackMode, cacheHolds bool) []Action {
	cb, acts := f.CallbackBegin(mode, cacheHolds, false)
	all := acts
	for range 4 {
		if last := all[len(all)-1]; last.Kind == ActAnswer {
			return all
		}
		for _, a := range acts {
			if a.Kind == ActWriteBack {
				if wb, ok := f.WriteBackBegin(); ok {
					f.WriteBackDone(wb, WBDone)
				}
			}
		}
		acts = f.CallbackEnd(&cb, false, false)
		all = append(all, acts...)
	}
	return all
}

func has(acts []Action, k ActionKind) bool {
	return slices.ContainsFunc(acts, func(a Action) bool { return a.Kind == k })
}

func kinds(acts []Action) []ActionKind {
	var ks []ActionKind
	for _, a := range acts {
		ks = append(ks, a.Kind)
	}
	return ks
}

func answer(acts []Action) state.Outcome {
	if len(acts) == 0 || acts[len(acts)-1].Kind != ActAnswer {
		return state.Failed
	}
	return acts[len(acts)-1].Outcome
}

func write(f *File) {
	if f.CacheWriteBegin() {
		f.CacheWriteEnd()
	}
}

// Each case names the section of docs/protocol.md whose rule it checks.
var cases = []struct {
	section, rule string
	cfg           Config
	run           func(t *testing.T, f *File) []Action
	want          []ActionKind // the actions of the last event, in order (nil: not checked)
	check         func(f *File) error
}{
	{"4.2", "an application open of a file not held sends OPEN", Config{},
		func(t *testing.T, f *File) []Action { _, a := f.OpenBegin(state.Read); return a },
		[]ActionKind{ActSendOpen}, func(f *File) error { return want("opening", f.Opening(), 1) }},
	{"4.2", "an answer allowing caching: the cache is relabelled, then used", Config{},
		func(t *testing.T, f *File) []Action {
			o, _ := f.OpenBegin(state.Write)
			acts := f.OpenAnswered(&o, grantW, nil)
			if k := kinds(acts); !slices.Equal(k, []ActionKind{ActCache}) || acts[0].Version != 8 {
				t.Fatalf("answer: %v", acts)
			}
			_, acts = f.OpenCached(&o, grantW, true)
			return acts
		},
		[]ActionKind{}, func(f *File) error {
			return errors.Join(want("caching", f.Caching(), true), want("version", f.Version(), uint64(8)),
				want("write opens", f.Opens(state.Write), 1), want("held", f.Held(), 1))
		}},
	{"12", "NFS3ERR_JUKEBOX (an OPEN that failed) counts no open", Config{},
		func(t *testing.T, f *File) []Action {
			o, _ := f.OpenBegin(state.Read)
			return f.OpenAnswered(&o, state.OpenReply{}, errors.New("jukebox"))
		},
		[]ActionKind{}, func(f *File) error { return errors.Join(want("held", f.Held(), 0), want("opening", f.Opening(), 0)) }},
	{"4.2", "cache_enabled = FALSE takes effect as it arrives: the other opens stop using the cache", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			o, _ := f.OpenBegin(state.Write)
			return f.OpenAnswered(&o, noCache, nil)
		},
		[]ActionKind{ActInvalidateCache, ActNotifyData}, func(f *File) error {
			return errors.Join(want("caching", f.Caching(), false), want("version", f.Version(), uint64(9)), want("held", f.Held(), 2))
		}},
	{"4.2", "a write-through answer writes the dirty data back before dropping the cache", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			return opened(t, f, state.Read, noCache)
		},
		[]ActionKind{ActWriteBack, ActInvalidateCache, ActNotifyData}, nil},
	{"5.1", "an OPEN in flight when an invalidating callback is served does not cache on its answer", Config{},
		func(t *testing.T, f *File) []Action {
			o, _ := f.OpenBegin(state.Read)
			if out := answer(serve(f, state.Invalidate, false)); out != state.OK {
				t.Fatalf("callback answered %v, want OK (the open in flight is held)", out)
			}
			return f.OpenAnswered(&o, grant, nil)
		},
		[]ActionKind{ActInvalidateCache}, func(f *File) error {
			return errors.Join(want("caching", f.Caching(), false), want("held", f.Held(), 1))
		}},
	{"5.1", "an invalidation while the answer is applied (between ActCache and OpenCached) wins", Config{},
		func(t *testing.T, f *File) []Action {
			o, _ := f.OpenBegin(state.Read)
			f.OpenAnswered(&o, grant, nil)
			serve(f, state.Invalidate, true)
			_, acts := f.OpenCached(&o, grant, true)
			return acts
		},
		[]ActionKind{ActInvalidateCache}, func(f *File) error { return want("caching", f.Caching(), false) }},
	{"4.2", "a refusal of caching revokes an earlier OPEN's grant not yet applied", Config{},
		func(t *testing.T, f *File) []Action {
			first, _ := f.OpenBegin(state.Read)
			f.OpenAnswered(&first, grant, nil) // ActCache: the driver settles attributes, relabels
			second, _ := f.OpenBegin(state.Write)
			f.OpenAnswered(&second, noCache, nil)
			_, acts := f.OpenCached(&first, grant, true)
			return acts
		},
		[]ActionKind{ActInvalidateCache}, func(f *File) error {
			return errors.Join(want("caching", f.Caching(), false), want("held", f.Held(), 2))
		}},
	{"5.1", "an OPEN in flight: never CB_STALE, never CB_TREAT_AS_CLOSED", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			f.OpenBegin(state.Read)
			acts := serve(f, state.Writeback, false)
			if out := answer(acts); out != state.OK {
				t.Fatalf("answered %v, want OK", out)
			}
			return acts
		},
		[]ActionKind{ActWriteBack, ActAnswer}, func(f *File) error { return nil }},
	{"5.1", "CB_STALE when nothing of the file is held", Config{},
		func(t *testing.T, f *File) []Action { return serve(f, state.WritebackInvalidate, false) },
		[]ActionKind{ActAnswer}, nil},
	{"5.1", "an invalidating callback: caching stops, then the write-back, then the cache goes", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			return serve(f, state.WritebackInvalidate, true)
		},
		[]ActionKind{ActStopCaching, ActWriteBack, ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActAnswer},
		func(f *File) error {
			return errors.Join(want("caching", f.Caching(), false), want("dirty", f.Dirty(), false), want("held", f.Held(), 1))
		}},
	{"5.1", "CB_WRITEBACK keeps caching and the opens: CB_OK", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			return serve(f, state.Writeback, true)
		},
		[]ActionKind{ActWriteBack, ActAnswer}, func(f *File) error {
			return errors.Join(want("caching", f.Caching(), true), want("dirty", f.Dirty(), false))
		}},
	{"5.1", "a callback sent again with no open left and nothing to write: CB_TREAT_AS_CLOSED", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
			acts := serve(f, state.Writeback, true)
			if out := answer(acts); out != state.TreatAsClosed {
				t.Fatalf("answered %v, want TREAT_AS_CLOSED", out)
			}
			return acts
		},
		[]ActionKind{ActWriteBack, ActAnswer}, nil},
	{"10", "delayed close: the last release of a cached file keeps its open (a timer, no CLOSE)", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{ActArmTimer}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 1), want("held", f.Held(), 1))
		}},
	{"10", "an application open takes a delayed close over: no OPEN (a read open takes a write one)", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.Release(t0, state.Write, false)
			o, acts := f.OpenBegin(state.Read)
			if !o.Reused || o.Mode != state.Write {
				t.Fatalf("open: %+v", o)
			}
			return acts
		},
		[]ActionKind{ActStopTimer, ActReuse}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 0), want("write opens", f.Opens(state.Write), 1))
		}},
	{"10", "no delayed close of a file not cached: CLOSE at once", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, noCache)
			return f.Release(t0, state.Read, false)
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, nil},
	{"10", "the delay passes: the kept opens are CLOSEd, dirty as the cache is", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			if acts := f.TimerFired(t0.Add(delay / 2)); !slices.Equal(kinds(acts), []ActionKind{ActArmTimer}) {
				t.Fatalf("early timer: %v", acts)
			}
			acts := f.TimerFired(t0.Add(delay))
			if !acts[0].Dirty || acts[0].Mode != state.Write {
				t.Fatalf("CLOSE: %v", acts[0])
			}
			return acts
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error { return want("held", f.Held(), 0) }},
	{"10", "a callback for a file only delayed closes hold: write-back, then CB_TREAT_AS_CLOSED; no CLOSE ever", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			acts := serve(f, state.Writeback, true)
			if more := f.TimerFired(t0.Add(delay)); len(more) != 0 {
				t.Fatalf("timer after CB_TREAT_AS_CLOSED: %v", more)
			}
			return acts
		},
		[]ActionKind{ActWriteBack, ActWriteBack, ActStopTimer, ActInvalidateAttr, ActNotifyAttr, ActAnswer},
		func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("caching", f.Caching(), false))
		}},
	{"5.1", "CB_RELINQUISH with an application open: CB_OK, opens kept", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			return serve(f, state.Relinquish, true)
		},
		[]ActionKind{ActWriteBack, ActAnswer}, func(f *File) error { return want("held", f.Held(), 1) }},
	{"4.4", "CLOSE says dirty while the cache holds unwritten data", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			acts := f.Release(t0, state.Write, false)
			if !acts[0].Dirty {
				t.Fatalf("CLOSE %v, want dirty", acts[0])
			}
			return acts
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, nil},
	{"4.4", "after the write-back of an idle file, CLOSE with dirty = FALSE clears the last-writer record", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			wb, _ := f.WriteBackBegin()
			f.WriteBackDone(wb, WBDone)
			acts := f.IdleClean()
			if acts[0].Dirty {
				t.Fatalf("CLOSE %v, want not dirty", acts[0])
			}
			return acts
		},
		[]ActionKind{ActSendClose}, nil},
	{"10", "a cache write during a write-back stays dirty", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			wb, _ := f.WriteBackBegin()
			write(f)
			return f.WriteBackDone(wb, WBDone)
		},
		[]ActionKind{}, func(f *File) error { return want("dirty", f.Dirty(), true) }},
	{"9", "the version rule: the kernel's pages are kept when their version is old_cache_version", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			o, _ := f.OpenBegin(state.Write)
			f.OpenAnswered(&o, grantW, nil)
			keep, acts := f.OpenCached(&o, grantW, true)
			if !keep {
				t.Fatal("pages of version 7 dropped after an OPEN_WRITE answering 8 (old 7)")
			}
			o, _ = f.OpenBegin(state.Read)
			r := state.OpenReply{CacheEnabled: true, Version: 11, OldVersion: 11}
			f.OpenAnswered(&o, r, nil)
			if keep, _ := f.OpenCached(&o, r, true); keep {
				t.Fatal("pages of version 8 kept after an OPEN answering 11")
			}
			return acts
		},
		[]ActionKind{}, nil},
	{"10.1", "a passthrough writer called back to invalidate enters the pinned mode: CB_PINNED", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			return serve(f, state.WritebackInvalidate, true)
		},
		[]ActionKind{ActPinEnter, ActStopCaching, ActWriteBack, ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActAnswer},
		func(f *File) error { return want("pinned", f.Pinned(), true) }},
	{"10.1", "the pinned holder answers each callback CB_PINNED after sending what its kernel wrote", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			serve(f, state.WritebackInvalidate, true)
			return serve(f, state.Writeback, true)
		},
		[]ActionKind{ActPinSync, ActAnswer}, nil},
	{"10.1", "the last passthrough close ends the pinned mode", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			serve(f, state.WritebackInvalidate, true)
			write(f) // (through the mount: the kernel's are ExternalWrite)
			f.ExternalWrite()
			if acts := f.PassthroughClose(state.Write); !has(acts, ActPinSync) {
				t.Fatalf("last passthrough close of the pinned holder: %v, want its writes sent", acts)
			}
			return serve(f, state.Writeback, true)
		},
		[]ActionKind{ActWriteBack, ActAnswer}, func(f *File) error { return want("pinned", f.Pinned(), false) }},
	{"10.1", "a passthrough writer that closes during its pinned entry: its writes go at the close, and no CB_PINNED", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			cb, _ := f.CallbackBegin(state.WritebackInvalidate, true, false)
			wb, _ := f.WriteBackBegin()
			f.WriteBackDone(wb, WBDone)
			f.ExternalWrite() // the kernel, after the entry's write-back
			if acts := f.PassthroughClose(state.Write); !slices.Equal(kinds(acts), []ActionKind{ActWriteBack, ActInvalidateCache}) {
				t.Fatalf("close: %v, want the kernel's writes sent (not cached any more)", acts)
			}
			wb, _ = f.WriteBackBegin()
			f.WriteBackDone(wb, WBDone)
			f.Release(t0, state.Write, false)
			return f.CallbackEnd(&cb, false, false)
		},
		[]ActionKind{ActAnswer}, func(f *File) error {
			return errors.Join(want("dirty", f.Dirty(), false), want("pinned", f.Pinned(), false))
		}},
	{"4.5", "RECLAIM reports opens with delayed closes, and a pinned holder as caching and dirty", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false) // an application open remains: CLOSEd, not kept
			f.PassthroughOpen(state.Write)
			serve(f, state.WritebackInvalidate, true)
			r, w, caching, dirty, v, ok := f.ReclaimItem()
			if !ok || r != 0 || w != 1 || !caching || !dirty || v != 7 {
				t.Fatalf("reclaim item: %d %d %v %v %d %v", r, w, caching, dirty, v, ok)
			}
			return nil
		},
		nil, nil},
	{"7.1", "a refused reclaim: caching stops, delayed closes are forgotten, dirty data reintegrated", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			return f.ServerRestarted(true)
		},
		[]ActionKind{ActStopTimer, ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActReintegrate},
		func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("caching", f.Caching(), false))
		}},
	{"7.1", "a reclaimed restart: dirty data is written back now", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			return f.ServerRestarted(false)
		},
		[]ActionKind{ActWriteBack}, func(f *File) error { return want("caching", f.Caching(), true) }},
	{"13", "reintegration relabels the cache with its OPEN's version; a conflict copy drops the cache", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Fenced()
			f.Reintegrated(12)
			if f.Version() != 12 || f.Caching() {
				t.Fatalf("after reintegration: version %d caching %v", f.Version(), f.Caching())
			}
			return f.Dropped()
		},
		[]ActionKind{ActNotifyData}, func(f *File) error {
			return errors.Join(want("dirty", f.Dirty(), false), want("busy", f.Busy(), true))
		}},
	{"5.1", "the invalidation epoch moves with every callback that invalidates", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			before := f.Invals()
			serve(f, state.Writeback, true)
			if f.Invals() != before {
				t.Fatal("CB_WRITEBACK moved the epoch")
			}
			serve(f, state.Invalidate, true)
			if f.Invals() == before {
				t.Fatal("CB_INVALIDATE did not move the epoch")
			}
			return nil
		},
		nil, nil},
	{"5.1", "a read or write through the server after caching stopped writes the older dirty data back first", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.CallbackBegin(state.WritebackInvalidate, true, false) // stopped; its write-back not yet done
			return f.Through()
		},
		[]ActionKind{ActWriteBack}, nil},
	{"13", "SNFS_ERR_FENCED on a write-back: clean data dropped, dirty data reintegrated", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			wb, _ := f.WriteBackBegin()
			return f.WriteBackDone(wb, WBFenced)
		},
		[]ActionKind{ActInvalidateAttr, ActInvalidateCache, ActNotifyData, ActReintegrate},
		func(f *File) error { return want("caching", f.Caching(), false) }},
	{"5.1", "a write-back that left the data here fails the callback: no CB_OK", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			cb, _ := f.CallbackBegin(state.Writeback, true, false)
			wb, _ := f.WriteBackBegin()
			f.WriteBackDone(wb, WBKept)
			acts := f.CallbackEnd(&cb, true, false)
			if out := answer(acts); out != state.Failed {
				t.Fatalf("answered %v, want a failure", out)
			}
			return acts
		},
		[]ActionKind{ActAnswer}, func(f *File) error {
			return errors.Join(want("dirty", f.Dirty(), true), want("held", f.Held(), 1))
		}},
	{"5.1", "a write-back that left the data of a file only delayed closes hold: no CB_TREAT_AS_CLOSED, the kept opens stay", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
			cb, _ := f.CallbackBegin(state.Relinquish, true, false)
			wb, _ := f.WriteBackBegin()
			f.WriteBackDone(wb, WBKept)
			acts := f.CallbackEnd(&cb, true, false)
			if out := answer(acts); out != state.Failed {
				t.Fatalf("answered %v, want a failure", out)
			}
			return acts
		},
		[]ActionKind{ActAnswer}, func(f *File) error {
			return errors.Join(want("kept", f.Kept(state.Write), 1), want("dirty", f.Dirty(), true))
		}},
	{"10.1", "a pinned entry the driver could not start: the callback goes on without it, no CB_PINNED", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			cb, acts := f.CallbackBegin(state.WritebackInvalidate, true, false)
			if !has(acts, ActPinEnter) || !has(acts, ActWriteBack) {
				t.Fatalf("callback: %v", acts)
			}
			f.PinEnterFailed(&cb)
			wb, _ := f.WriteBackBegin()
			f.WriteBackDone(wb, WBDone)
			return f.CallbackEnd(&cb, false, false)
		},
		[]ActionKind{ActAnswer}, func(f *File) error {
			return errors.Join(want("pinned", f.Pinned(), false), want("caching", f.Caching(), false))
		}},
	{"4.4", "a cache file found holding unwritten data (an earlier mount's): CLOSE says dirty", Config{},
		func(t *testing.T, f *File) []Action {
			f.CacheFoundDirty()
			if acts := f.IdleClean(); len(acts) != 0 {
				t.Fatalf("idle clean CLOSE over unwritten data: %v", acts)
			}
			opened(t, f, state.Read, grant)
			acts := f.Release(t0, state.Read, false)
			if !acts[0].Dirty {
				t.Fatalf("CLOSE %v, want dirty", acts[0])
			}
			return acts
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error { return want("busy", f.Busy(), true) }},
	{"7.1", "a refused reclaim forgets the applications' opens it reported: their releases send no CLOSE", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			if _, w, _, _, _, ok := f.ReclaimItem(); !ok || w != 1 {
				t.Fatalf("reclaim item: %d writers, ok %v", w, ok)
			}
			f.ServerRestarted(true)
			if n := f.Forgotten(state.Write); n != 1 {
				t.Fatalf("forgotten write opens: %d, want 1", n)
			}
			return f.Release(t0, state.Write, false)
		},
		[]ActionKind{ActInvalidateAttr, ActNotifyAttr}, func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("forgotten", f.Forgotten(state.Write), 0))
		}},
	{"7.1", "an open OPENed again after a refused reclaim is the server's again: CLOSEd at its release", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.ReclaimItem()
			f.ServerRestarted(true)
			f.Reopened(state.Read)
			return f.Release(t0, state.Read, false)
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, nil},
	{"7.1", "an open answered by the new server before the refusal is not forgotten", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			f.ReclaimItem()
			opened(t, f, state.Read, grant) // on the new connection, before the refusal
			f.ServerRestarted(true)
			if n := f.Forgotten(state.Read); n != 1 {
				t.Fatalf("forgotten read opens: %d, want 1", n)
			}
			f.Release(t0, state.Read, false) // the forgotten one (opens of a mode are alike)
			return f.Release(t0, state.Read, false)
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, nil},
	{"4.5", "a reclaim leaves out the opens an earlier refused reclaim made forgotten and no OPEN gave back", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			opened(t, f, state.Read, grant)
			f.ReclaimItem()
			f.ServerRestarted(true)
			f.Reopened(state.Read) // the write open's OPEN failed: still forgotten
			r, w, _, _, _, ok := f.ReclaimItem()
			if !ok || r != 1 || w != 0 {
				t.Fatalf("reclaim item: %d readers %d writers, ok %v; want 1, 0", r, w, ok)
			}
			return nil
		},
		nil, nil},
	{"4.2", "an open whose application failed after its OPEN's answer is CLOSEd, never kept", Config{CloseDelay: delay},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Read, grant)
			return f.OpenUndone(state.Read)
		},
		[]ActionKind{ActSendClose, ActInvalidateAttr, ActNotifyAttr}, func(f *File) error {
			return errors.Join(want("held", f.Held(), 0), want("kept", f.Kept(state.Read), 0))
		}},
	{"10.1", "the kernel's passthrough writes to a file no longer cached go to the server when taken in, and do not stay cached", Config{},
		func(t *testing.T, f *File) []Action {
			opened(t, f, state.Write, grantW)
			f.PassthroughOpen(state.Write)
			if acts := f.ExternalTaken(); len(acts) != 0 {
				t.Fatalf("nothing written yet: %v", acts)
			}
			f.ExternalWrite()
			if acts := f.ExternalTaken(); len(acts) != 0 {
				t.Fatalf("cached: the kernel's writes stay dirty, %v", acts)
			}
			opened(t, f, state.Read, noCache) // write-shared from here
			f.ExternalWrite()
			return f.ExternalTaken()
		},
		[]ActionKind{ActWriteBack, ActInvalidateCache}, nil},
}

func want[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}

func TestRules(t *testing.T) {
	for _, c := range cases {
		t.Run(c.section+" "+c.rule, func(t *testing.T) {
			f := New(c.cfg)
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

// TestCallbackAnswers checks the outcome of each case of docs/protocol.md
// 5.1 and 10 (rule 9 of section 16).
func TestCallbackAnswers(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		prep func(t *testing.T, f *File)
		mode state.CallbackMode
		out  state.Outcome
	}{
		{"nothing held", Config{}, func(*testing.T, *File) {}, state.Writeback, state.Stale},
		{"an OPEN in flight", Config{}, func(_ *testing.T, f *File) { f.OpenBegin(state.Read) }, state.Invalidate, state.OK},
		{"an application open", Config{}, func(t *testing.T, f *File) { opened(t, f, state.Read, grant) }, state.Invalidate, state.OK},
		{"delayed closes only", Config{CloseDelay: delay}, func(t *testing.T, f *File) {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
		}, state.Invalidate, state.TreatAsClosed},
		{"delayed closes only, relinquish", Config{CloseDelay: delay}, func(t *testing.T, f *File) {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
		}, state.Relinquish, state.TreatAsClosed},
		{"no open, the cache holds clean data", Config{}, func(t *testing.T, f *File) {
			opened(t, f, state.Read, grant)
			f.Release(t0, state.Read, false)
		}, state.Writeback, state.TreatAsClosed},
		{"last writer, closed dirty", Config{}, func(t *testing.T, f *File) {
			opened(t, f, state.Write, grantW)
			write(f)
			f.Release(t0, state.Write, false)
		}, state.Writeback, state.TreatAsClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New(c.cfg)
			c.prep(t, f)
			if got := answer(serve(f, c.mode, f.hasData)); got != c.out {
				t.Errorf("%v answered %v, want %v", c.mode, got, c.out)
			}
		})
	}
	if got := UnknownCallback(state.Writeback, false); got != state.Stale {
		t.Errorf("unknown file, nothing cached: %v", got)
	}
	if got := UnknownCallback(state.Relinquish, true); got != state.TreatAsClosed {
		t.Errorf("unknown file, relinquish: %v", got)
	}
}
