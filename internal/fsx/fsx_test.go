package fsx

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// diskDir makes a directory on a disk file system (/var/tmp), not tmpfs.
func diskDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "snfs-fsx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fullConfig enables every operation kind (appends, not in the defaults, too).
func fullConfig(path string, seed uint64, ops int) Config {
	w := DefaultWeights
	w.Append = 10
	return Config{Path: path, Ops: ops, Seed: seed, Mmap: true, Fsync: true, Punch: true,
		ReopenEvery: 997, CheckEvery: 5000, Weights: w}
}

func TestLocalDisk(t *testing.T) {
	dir := diskDir(t)
	path := filepath.Join(dir, "fsx.dat")
	cfg := fullConfig(path, 1, localOps)
	// The export-directory style check: the same file read by path, after an fsync.
	cfg.ExternalCheck = CompareFile(path)
	// No time bound of its own (speed is not what this tests: on a machine
	// under heavy I/O, 100,000 operations took over a minute); the test
	// binary's -timeout catches a hang.
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	for k := OpRead; k <= OpCheck; k++ {
		if rep.Counts[k] == 0 {
			t.Errorf("no %v operation in %d", k, rep.Ops)
		}
	}
	if rep.Ops != localOps || rep.ExternalChecks != localOps/5000+1 {
		t.Errorf("ops %d, external checks %d; want %d, %d", rep.Ops, rep.ExternalChecks, localOps, localOps/5000+1)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != rep.FinalSize {
		t.Errorf("file left with size %v (%v), report says %d", fi.Size(), err, rep.FinalSize)
	}
}

func TestSameSeedSameSequence(t *testing.T) {
	cfg := fullConfig("", 7, 3000)
	a, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	cfg.Seed = 8
	c, _ := Plan(cfg)
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 7 and 8 give the same plan")
	}
	// Run does what Plan says, twice over.
	cfg.Seed = 7
	cfg.Path = filepath.Join(diskDir(t), "fsx.dat")
	var runs [2][]Op
	var reps [2]Report
	for i := range runs {
		cfg.Trace = func(op Op) { runs[i] = append(runs[i], op) }
		if reps[i], err = Run(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(runs[0], a) || !reflect.DeepEqual(runs[1], a) {
		t.Fatal("a run's operations differ from the plan")
	}
	if !reflect.DeepEqual(reps[0].Counts, reps[1].Counts) || reps[0].BytesWritten != reps[1].BytesWritten ||
		reps[0].FinalSize != reps[1].FinalSize {
		t.Fatalf("two runs of one seed differ:\n%v\n%v", reps[0], reps[1])
	}
}

// corruptFile flips one byte of what ReadAt returns during operation *at == target.
type corruptFile struct {
	*os.File
	cur    *int
	target int
}

func (f corruptFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if *f.cur == f.target && n > 0 {
		p[n/2] ^= 0x5a
	}
	return n, err
}

func TestFaultDetected(t *testing.T) {
	cfg := fullConfig(filepath.Join(diskDir(t), "fsx.dat"), 42, 5000)
	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var target Op
	for _, op := range plan[1234:] {
		if op.Kind == OpRead && !op.Skip {
			target = op
			break
		}
	}
	cur := 0
	cfg.Trace = func(op Op) { cur = op.N }
	cfg.Open = func(path string, flag int) (File, error) {
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return nil, err
		}
		return corruptFile{f, &cur, target.N}, nil
	}
	rep, err := Run(context.Background(), cfg)
	var fe *Error
	var m *Mismatch
	if !errors.As(err, &fe) || !errors.As(err, &m) {
		t.Fatalf("want an *Error with a *Mismatch, got %v", err)
	}
	t.Logf("the report:\n%v", err)
	wantOff := target.Off + target.Len/2
	if fe.Seed != 42 || fe.Op != target || m.What != "read" || m.First != wantOff || m.Last != wantOff || m.Bad != 1 {
		t.Errorf("got seed %d op %+v, mismatch %s at %#x..%#x (%d bytes); want seed 42 op %+v at %#x",
			fe.Seed, fe.Op, m.What, m.First, m.Last, m.Bad, target, wantOff)
	}
	if rep.Ops != target.N || len(fe.Log) != 20 || fe.Log[19] != target {
		t.Errorf("stopped after %d ops with a log of %d ending %v; want %d, 20, the target", rep.Ops, len(fe.Log), fe.Log[len(fe.Log)-1], target.N)
	}
	msg := err.Error()
	for _, want := range []string{"seed 42", "op " + strconv.Itoa(target.N) + " of 5000", "expected:", "actual:",
		"-fsx.seed=42 -fsx.ops=" + strconv.Itoa(target.N), "last 20 operations"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if m.Origin == 0 || m.Origin >= target.N {
		t.Errorf("origin of the expected byte: op %d", m.Origin)
	}
}

// An external check that sees different bytes (a second path whose copy is
// stale) fails the run with the check's operation number.
func TestExternalMismatch(t *testing.T) {
	path := filepath.Join(diskDir(t), "fsx.dat")
	cfg := fullConfig(path, 3, 3000)
	cfg.CheckEvery, cfg.CheckPrep = 1000, PrepClose
	cfg.ExternalCheck = func(ctx context.Context, s Snapshot) error {
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if s.N == 2000 && len(got) > 100 {
			got[100]++
		}
		if m := Compare("external second view", s.Data, got, 0); m != nil {
			return m
		}
		return nil
	}
	_, err := Run(context.Background(), cfg)
	var fe *Error
	var m *Mismatch
	if !errors.As(err, &fe) || !errors.As(err, &m) || fe.Op.N != 2000 || fe.Op.Kind != OpCheck || m.First != 100 {
		t.Fatalf("want a mismatch at offset 100 in the check of op 2000, got %v", err)
	}
}

func TestContextDeadline(t *testing.T) {
	cfg := fullConfig(filepath.Join(diskDir(t), "fsx.dat"), 5, 1<<30)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stopped by the context") {
		t.Fatalf("want a stop by the deadline, got %v", err)
	}
	if time.Since(start) > 5*time.Second || rep.Ops == 0 {
		t.Fatalf("stopped after %v and %d ops", time.Since(start), rep.Ops)
	}
	t.Log(err)
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Weights: Weights{MapRead: 1}}, // only mmap weights, mmap off
		{MaxLen: -1},
		{Weights: Weights{Read: -1, Write: 2}},
	} {
		if _, err := Plan(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	w, err := ParseWeights(DefaultWeights.String())
	if err != nil || w != DefaultWeights {
		t.Errorf("weights round trip: %v %v", w, err)
	}
	if _, err := ParseWeights("read=1,bogus=2"); err == nil {
		t.Error("unknown weight accepted")
	}
}

// A mapping read past the file's real end (a file system that reported a larger
// size than it holds) is an error, not a SIGBUS that kills the test binary.
func TestMappedFaultIsAnError(t *testing.T) {
	path := filepath.Join(diskDir(t), "short.dat")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	if err := f.Truncate(page); err != nil {
		t.Fatal(err)
	}
	r := &runner{f: f, page: page}
	err = r.mapped(0, 3*page, unix.PROT_READ, func(mem []byte, at int) error {
		_ = append([]byte(nil), mem[at:]...)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "fault in the mapping") {
		t.Fatalf("want a fault error, got %v", err)
	}
	t.Log(err)
}
