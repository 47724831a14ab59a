package fsx

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The flags of TestFsxReplay; an *Error prints the ones that rebuild its run.
var (
	replaySeed       = flag.Uint64("fsx.seed", 0, "TestFsxReplay: the seed to rerun (0: skip the test)")
	replayOps        = flag.Int("fsx.ops", 10000, "TestFsxReplay: operations")
	replayMaxLen     = flag.Int64("fsx.maxlen", 256<<10, "TestFsxReplay: file size bound")
	replayMaxOpLen   = flag.Int64("fsx.maxoplen", 0, "TestFsxReplay: bound on one read or write (0: maxlen/4)")
	replayMmap       = flag.Bool("fsx.mmap", false, "TestFsxReplay: mapped reads and writes")
	replayFsync      = flag.Bool("fsx.fsync", false, "TestFsxReplay: fsync operations")
	replayPunch      = flag.Bool("fsx.punch", false, "TestFsxReplay: fallocate punch and zero")
	replayReopen     = flag.Int("fsx.reopen", 0, "TestFsxReplay: close and reopen every N operations")
	replayWeights    = flag.String("fsx.weights", "", "TestFsxReplay: weights, e.g. read=25,write=25 (empty: defaults)")
	replayCheckEvery = flag.Int("fsx.checkevery", 0, "TestFsxReplay: whole-file check every N operations")
	replayCheckPrep  = flag.String("fsx.checkprep", "fsync", "TestFsxReplay: before a check: fsync, none, close or fsync+close")
	replayDir        = flag.String("fsx.dir", "", "TestFsxReplay: directory for the file (default: a new one under /var/tmp); a mount to replay against it")
	replayTimeout    = flag.Duration("fsx.timeout", 10*time.Minute, "TestFsxReplay: bound on the run")
)

// TestFsxReplay reruns one seed and logs every operation:
//
//	go test -v -run TestFsxReplay snfs/internal/fsx -fsx.seed=N [flags printed by the failure]
func TestFsxReplay(t *testing.T) {
	if *replaySeed == 0 {
		t.Skip("no -fsx.seed given")
	}
	cfg, err := replayConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := *replayDir
	if dir == "" {
		dir = diskDir(t)
	}
	cfg.Path = filepath.Join(dir, "fsx-replay.dat")
	defer os.Remove(cfg.Path)
	cfg.LogLen = 50
	cfg.Trace = func(op Op) { t.Log(op) }
	ctx, cancel := context.WithTimeout(context.Background(), *replayTimeout)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
}

// replayConfig builds the Config the -fsx.* flags describe (without Path).
func replayConfig() (Config, error) {
	w, err := ParseWeights(*replayWeights)
	if err != nil {
		return Config{}, err
	}
	prep, err := ParsePrep(*replayCheckPrep)
	if err != nil {
		return Config{}, err
	}
	return Config{Ops: *replayOps, Seed: *replaySeed, MaxLen: *replayMaxLen, MaxOpLen: *replayMaxOpLen,
		Weights: w, Mmap: *replayMmap, Fsync: *replayFsync, Punch: *replayPunch, ReopenEvery: *replayReopen,
		CheckEvery: *replayCheckEvery, CheckPrep: prep}, nil
}

// The flags an *Error prints rebuild its sequence up to the failed operation.
func TestReplayFlagsRebuildThePlan(t *testing.T) {
	for _, cfg := range []Config{
		fullConfig("", 42, 5000),
		{Seed: 9, Ops: 3000, MaxLen: 1 << 20, MaxOpLen: 4096, Weights: Weights{Read: 3, Write: 5, Truncate: 1, Reopen: 1},
			CheckEvery: 100, CheckPrep: PrepFsyncClose},
	} {
		full, err := Plan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := cfg.normalize()
		for _, n := range []int{1234, cfg.Ops} {
			saved := map[string]string{}
			flag.VisitAll(func(f *flag.Flag) { saved[f.Name] = f.Value.String() })
			for _, arg := range strings.Fields(c.replayFlags(n)) {
				name, val, ok := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
				if !ok {
					val = "true"
				}
				if err := flag.Set(name, val); err != nil {
					t.Fatal(err)
				}
			}
			rc, err := replayConfig()
			for name, val := range saved {
				flag.Set(name, val)
			}
			if err != nil {
				t.Fatal(err)
			}
			replay, err := Plan(rc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(replay[:n], full[:n]) {
				t.Errorf("%s: the replay's first %d operations differ", c.replayFlags(n), n)
			}
		}
	}
}
