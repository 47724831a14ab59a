package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
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

// version describes this binary: module version, VCS revision, Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "snfs (no build information)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "snfs %s", bi.Main.Version)
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, " %s", rev)
		if settings["vcs.modified"] == "true" {
			b.WriteString(" (modified)")
		}
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " %s", t)
		}
	} else {
		b.WriteString(" (no VCS revision: built with -buildvcs=false or outside a repository)")
	}
	fmt.Fprintf(&b, " %s", bi.GoVersion)
	return b.String()
}
