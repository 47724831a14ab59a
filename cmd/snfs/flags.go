package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// errHelp: -h or --help was given and the usage was printed; exit 0.
var errHelp = errors.New("help requested")

// errUsage: the command line was wrong and flag already said why; exit 2.
var errUsage = errors.New("usage error")

// newFlagSet returns a flag set whose usage, generated from its flags so that it
// cannot drift from them, starts with synopsis.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { printUsage(fs.Output(), fs, synopsis) }
	return fs
}

func printUsage(w io.Writer, fs *flag.FlagSet, synopsis string) {
	fmt.Fprintf(w, "usage: %s\n\nflags:\n", synopsis)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// parseArgs parses args with fs, taking flags before, between or after the
// positional arguments (`serve /srv/share --nfs-port 2049`); everything after
// "--" is positional. -h and --help print the usage to standard output and
// return errHelp.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	// flag.Parse itself calls Usage on -h, to fs.Output() (stderr): silence that
	// call, so that the usage is printed once, to standard output for -h and to
	// stderr after the error message of a wrong command line.
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				out := fs.Output()
				fs.SetOutput(os.Stdout)
				usage()
				fs.SetOutput(out)
				return nil, errHelp
			}
			usage()
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at "--" (consuming it) or at the first non-flag argument.
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// version describes this binary in one line: its module version, the
// commit it was built from (the vcs.revision that go build records when it
// builds in a git clone; "unknown" with -buildvcs=false, outside a clone, or
// in a git worktree, which go build does not recognize: golang/go#58218),
// and the Go version and platform.
func version() string {
	mod, rev, at, modified := "(devel)", "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			mod = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	commit := "commit unknown (built outside a git clone, in a git worktree, or with -buildvcs=false)"
	if rev != "" {
		commit = "commit " + rev
		if at != "" {
			commit += " of " + at
		}
		if modified {
			commit += " with uncommitted changes"
		}
	}
	return fmt.Sprintf("snfs %s, %s, %s %s/%s", mod, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
