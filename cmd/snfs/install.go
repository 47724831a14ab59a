package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// helperNames are the names mount(8) looks for in /sbin: mount.snfs for
// `mount -t snfs` (and fstab lines of type snfs), mount.fuse.snfs for
// `mount -t fuse.snfs`, the type /proc/mounts lists.
var helperNames = []string{helperName, "mount.fuse.snfs"}

const installSynopsis = `snfs install [--dir DIR] [--remove]

Makes this binary mount(8)'s helper for types snfs and fuse.snfs: symbolic links
DIR/mount.snfs and DIR/mount.fuse.snfs to its absolute path (a link already there
is replaced; a file that is not a link is left alone, with an error). Run it again
after moving the binary. --remove removes the links.`

// installCmd is `snfs install`.
func installCmd(args []string) error {
	fset := newFlagSet("install", installSynopsis)
	dir := fset.String("dir", "/sbin", "where mount(8) looks for helpers")
	remove := fset.Bool("remove", false, "remove the links instead")
	pos, err := parseArgs(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fset.Usage()
		return errUsage
	}
	if *remove {
		return uninstall(*dir)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the path of this binary: %w", err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return fmt.Errorf("the path of this binary: %w", err)
	}
	if strings.Contains(self, "/go-build") {
		// `go run`'s binary goes with its temporary directory.
		return fmt.Errorf("%s is go run's temporary build; build snfs first (go build -o snfs ./cmd/snfs) and run ./snfs install", self)
	}
	for _, name := range helperNames {
		if err := installLink(filepath.Join(*dir, name), self); err != nil {
			return err
		}
	}
	return nil
}

// installLink makes link a symbolic link to target, saying what it did.
func installLink(link, target string) error {
	old, err := os.Readlink(link)
	switch {
	case err == nil && old == target:
		fmt.Printf("%s -> %s (already there)\n", link, target)
		return nil
	case err == nil:
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("replace %s: %w", link, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return err
		}
		fmt.Printf("%s -> %s (replaced a link to %s)\n", link, target, old)
		return nil
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Symlink(target, link); err != nil {
			return err
		}
		fmt.Printf("%s -> %s (created)\n", link, target)
		return nil
	}
	if _, serr := os.Lstat(link); serr == nil {
		return fmt.Errorf("%s exists and is not a symbolic link: not replacing it (remove it first)", link)
	}
	return fmt.Errorf("install %s: %w", link, err)
}

// uninstall removes the helper links from dir.
func uninstall(dir string) error {
	for _, name := range helperNames {
		link := filepath.Join(dir, name)
		if _, err := os.Readlink(link); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				fmt.Printf("%s: not there\n", link)
				continue
			}
			return fmt.Errorf("%s is not a symbolic link: not removing it", link)
		}
		if err := os.Remove(link); err != nil {
			return err
		}
		fmt.Printf("%s: removed\n", link)
	}
	return nil
}
