package tests

import (
	"bufio"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The parser of prove's summary for TestMountPjdfstest
// (mount_pjdfstest_norace_test.go), tested under the race detector too.

var (
	proveFile  = regexp.MustCompile(`^(\S+\.t)\s+\(Wstat: (\d+)(?: \(.*?\))? Tests: (\d+) Failed: (\d+)\)`)
	proveTotal = regexp.MustCompile(`^Files=\d+, Tests=(\d+),`)
)

// parseProve reads prove's summary: the failed subtests as "dir/NN.t:N"
// (a file that died or whose plan went wrong as "dir/NN.t:exit" or
// "dir/NN.t:parse") and the number of subtests run.
func parseProve(out string) (failed []string, total int, err error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	var file, key string
	inSummary := false
	for sc.Scan() {
		line := sc.Text()
		if m := proveTotal.FindStringSubmatch(line); m != nil {
			total, _ = strconv.Atoi(m[1])
			continue
		}
		if strings.HasPrefix(line, "Test Summary Report") {
			inSummary = true
			continue
		}
		if !inSummary {
			continue
		}
		if m := proveFile.FindStringSubmatch(line); m != nil {
			file = shortTest(m[1])
			key = ""
			if m[2] != "0" {
				failed = append(failed, file+":exit")
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		if k, rest, ok := strings.Cut(trimmed, ":"); ok && !strings.ContainsAny(k, "0123456789") {
			key, trimmed = k, strings.TrimSpace(rest)
			switch key {
			case "Parse errors", "Non-zero exit status", "Non-zero wait status":
				failed = append(failed, file+":"+map[bool]string{true: "parse", false: "exit"}[key == "Parse errors"])
				continue
			}
		}
		if key != "Failed test" && key != "Failed tests" || file == "" {
			continue
		}
		for _, f := range strings.Split(trimmed, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			lo, hi, isRange := strings.Cut(f, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, 0, fmt.Errorf("prove summary line %q: not a subtest list", line)
			}
			for n := a; n <= b; n++ {
				failed = append(failed, file+":"+strconv.Itoa(n))
			}
		}
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("no Files=…, Tests=… line: prove did not finish")
	}
	sort.Strings(failed)
	return failed, total, nil
}

// shortTest is a test file's path from its tests directory ("open/06.t").
func shortTest(p string) string {
	return filepath.Join(filepath.Base(filepath.Dir(p)), filepath.Base(p))
}

// TestParseProve: the summary of pjdfstest on an snfs-mode mount before
// issue 22's fixes (71 failed subtests) and a file that died.
func TestParseProve(t *testing.T) {
	t.Parallel()
	failed, total, err := parseProve(proveSample)
	if err != nil {
		t.Fatal(err)
	}
	if total != 8798 || len(failed) != 71 {
		t.Fatalf("%d subtests, %d failed: %v; want 8798, 71", total, len(failed), failed)
	}
	for _, f := range []string{"chmod/12.t:3", "chmod/12.t:4", "open/06.t:18", "open/06.t:110", "open/07.t:22", "open/07.t:23", "utimensat/09.t:5"} {
		if sort.SearchStrings(failed, f) == len(failed) || failed[sort.SearchStrings(failed, f)] != f {
			t.Errorf("%s not among the failed: %v", f, failed)
		}
	}
	died := "Test Summary Report\n-------------------\n/x/tests/rename/00.t (Wstat: 256 (exited 1) Tests: 3 Failed: 1)\n  Failed test:  2\n  Non-zero exit status: 1\n  Parse errors: Bad plan.  You planned 10 tests but ran 3.\nFiles=1, Tests=3,  1 wallclock secs\nResult: FAIL\n"
	failed, _, err = parseProve(died)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(failed, " ") != "rename/00.t:2 rename/00.t:exit rename/00.t:exit rename/00.t:parse" {
		t.Errorf("a file that died: %v", failed)
	}
	if _, _, err := parseProve("t/00.t .. 1/3"); err == nil {
		t.Error("an unfinished run parsed without error")
	}
}

const proveSample = `Test Summary Report
-------------------
/tmp/x/pjdfstest/tests/chmod/05.t          (Wstat: 0 Tests: 14 Failed: 1)
  Failed test:  8
/tmp/x/pjdfstest/tests/chmod/12.t          (Wstat: 0 Tests: 14 Failed: 6)
  Failed tests:  3-4, 7-8, 11-12
/tmp/x/pjdfstest/tests/chown/00.t          (Wstat: 0 Tests: 1280 Failed: 0)
  TODO passed:   1054, 1058, 1064, 1069, 1073, 1079, 1084
                1088, 1094, 1099, 1103, 1109, 1114, 1118
                1124, 1129, 1133, 1139, 1144
/tmp/x/pjdfstest/tests/chown/05.t          (Wstat: 0 Tests: 18 Failed: 3)
  Failed tests:  8-9, 11
/tmp/x/pjdfstest/tests/ftruncate/05.t      (Wstat: 0 Tests: 15 Failed: 2)
  Failed tests:  8, 10
/tmp/x/pjdfstest/tests/ftruncate/06.t      (Wstat: 0 Tests: 8 Failed: 1)
  Failed test:  6
/tmp/x/pjdfstest/tests/link/06.t           (Wstat: 0 Tests: 18 Failed: 3)
  Failed tests:  11, 17-18
/tmp/x/pjdfstest/tests/open/05.t           (Wstat: 0 Tests: 12 Failed: 1)
  Failed test:  7
/tmp/x/pjdfstest/tests/open/06.t           (Wstat: 0 Tests: 144 Failed: 36)
  Failed tests:  18-19, 22-23, 26-27, 29, 33, 37, 41-42
                45-46, 49-50, 53-54, 57-58, 61-62, 78, 82
                86, 88, 90, 92, 94, 96, 98, 100, 102, 104
                106, 108, 110
/tmp/x/pjdfstest/tests/open/07.t           (Wstat: 0 Tests: 25 Failed: 10)
  Failed tests:  6, 8, 10, 12, 14, 16, 18, 20, 22-23
/tmp/x/pjdfstest/tests/truncate/05.t       (Wstat: 0 Tests: 15 Failed: 2)
  Failed tests:  8, 10
/tmp/x/pjdfstest/tests/truncate/06.t       (Wstat: 0 Tests: 8 Failed: 1)
  Failed test:  6
/tmp/x/pjdfstest/tests/utimensat/05.t      (Wstat: 0 Tests: 16 Failed: 4)
  Failed tests:  4, 7-8, 13
/tmp/x/pjdfstest/tests/utimensat/09.t      (Wstat: 0 Tests: 7 Failed: 1)
  Failed test:  5
Files=238, Tests=8798, 306 wallclock secs ( 3.61 usr  0.84 sys + 52.61 cusr 25.88 csys = 82.94 CPU)
Result: FAIL
`
