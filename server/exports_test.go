package server

import (
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
)

func opts(f func(*Options)) Options {
	o := DefaultOptions
	f(&o)
	return o
}

func TestParseExports(t *testing.T) {
	ten := &net.IPNet{IP: net.IPv4(10, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}
	lo := &net.IPNet{IP: net.IPv4(127, 0, 0, 1).To4(), Mask: net.CIDRMask(32, 32)}
	v6 := &net.IPNet{IP: net.ParseIP("fd00::"), Mask: net.CIDRMask(8, 128)}
	for _, tc := range []struct {
		name, in string
		want     []ExportConfig
	}{
		{"defaults: ro,root_squash,sync,insecure to everyone", "/srv/a\n",
			[]ExportConfig{{Path: "/srv/a", Clients: []ClientRule{{Spec: "*", Opts: DefaultOptions}}}}},
		{"every option", "/srv/a *(rw,no_root_squash,all_squash,anonuid=1000,anongid=1001,async,secure,no_subtree_check)",
			[]ExportConfig{{Path: "/srv/a", Clients: []ClientRule{{Spec: "*", Opts: Options{AllSquash: true, AnonUID: 1000, AnonGID: 1001, Async: true, Secure: true}}}}}},
		{"later options win", "/srv/a *(secure,insecure,rw,ro,no_all_squash)",
			[]ExportConfig{{Path: "/srv/a", Clients: []ClientRule{{Spec: "*", Opts: DefaultOptions}}}}},
		{"several clients, networks, addresses, IPv6, comments and blank lines",
			"# comment\n\n/srv/a 127.0.0.1(rw) 10.0.0.0/8(ro,all_squash) fd00::/8 # trailing\n/srv/b (rw)\n",
			[]ExportConfig{
				{Path: "/srv/a", Clients: []ClientRule{
					{Spec: "127.0.0.1", Net: lo, Opts: opts(func(o *Options) { o.ReadOnly = false })},
					{Spec: "10.0.0.0/8", Net: ten, Opts: opts(func(o *Options) { o.AllSquash = true })},
					{Spec: "fd00::/8", Net: v6, Opts: DefaultOptions}}},
				{Path: "/srv/b", Clients: []ClientRule{{Spec: "*", Opts: opts(func(o *Options) { o.ReadOnly = false })}}}}},
		{"continuation lines", "/srv/a \\\n  127.0.0.1(rw) \\\n  *(ro)\n",
			[]ExportConfig{{Path: "/srv/a", Clients: []ClientRule{
				{Spec: "127.0.0.1", Net: lo, Opts: opts(func(o *Options) { o.ReadOnly = false })},
				{Spec: "*", Opts: DefaultOptions}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseExports("exports", strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestExportsExample: the example file shipped in contrib/ parses.
func TestExportsExample(t *testing.T) {
	ex, err := ParseExports("../contrib/exports.example")
	if err != nil || len(ex) != 2 || len(ex[1].Clients) != 2 || !ex[1].Clients[0].Opts.Secure {
		t.Fatalf("contrib/exports.example: %+v, %v", ex, err)
	}
}

// TestParseExportsErrors: every error names the file and the line, and an option
// error names the option.
func TestParseExportsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/srv/a *(rw)\n/srv/b *(rw,nosuchopt)\n", `/etc/exports:2: unknown export option "nosuchopt" for *(rw,nosuchopt)`},
		{"\n\n/srv/a 10.0.0.0/8(anonuid=x)\n", `/etc/exports:3: unknown export option: anonuid needs a number, got "x"`},
		{"relative *(rw)\n", `/etc/exports:1: export path "relative" is not absolute`},
		{"/srv/a *(rw\n", `/etc/exports:1: unbalanced parenthesis`},
		{"/srv/a host.example(rw)\n", `/etc/exports:1: client "host.example": only *, addresses and CIDR networks are supported`},
		{"/srv/a *(rw) \\", `/etc/exports:1: the last line ends with a backslash`},
		{"/srv/a " + strings.Repeat("x", 70000), `/etc/exports:1: bufio.Scanner: token too long`},
	} {
		_, err := parseExports("/etc/exports", strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%.40q: error %v, want %s", tc.in, err, tc.want)
		}
	}
	_, err := parseExports("f", strings.NewReader("/a *(bogus)"))
	if !errors.Is(err, ErrExportOption) {
		t.Errorf("error %v does not wrap ErrExportOption", err)
	}
}

// FuzzParseExports: no input panics the parser, every error names the file, and
// every accepted export is absolute with at least one client rule.
func FuzzParseExports(f *testing.F) {
	for _, s := range []string{"/srv/a\n", "/srv/a 127.0.0.1(rw,no_root_squash) 10.0.0.0/8(ro) *(ro,all_squash,anonuid=1000,anongid=1000)\n",
		"# c\n/srv/a \\\n *(rw,secure)\n", "/srv/a *(rw", "/x fd00::/8(insecure,async)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseExports("F", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "F:") {
				t.Fatalf("error without file and line: %v", err)
			}
			return
		}
		for _, ec := range got {
			if !strings.HasPrefix(ec.Path, "/") || len(ec.Clients) == 0 {
				t.Fatalf("accepted %+v", ec)
			}
		}
	})
}
