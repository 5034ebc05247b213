package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionText describes this build of etcdlock, from the build information
// that the Go toolchain records in the binary: the module version ("(devel)"
// for a build from a checkout), the VCS commit, when the binary was built
// with VCS stamping (-buildvcs, the default in a git checkout), and the
// version of etcd's client and of Go.
func versionText() string {
	version, module, commit, etcd, lib := "(devel)", "unknown", "unknown (built without VCS information)", "unknown", "unknown"
	var vcsTime, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/seed-a9d410c6/concurrency" {
				// In a clone, go.work puts the tree in place of the
				// placeholder version that go.mod requires.
				lib = d.Version
				if d.Replace != nil || strings.HasPrefix(d.Version, "v0.0.0-00010101000000") {
					lib = "(devel)"
				}
			}
			if d.Path == "go.etcd.io/etcd/client/v3" {
				etcd = d.Version
				if d.Replace != nil {
					etcd = d.Replace.Version + " (replaced)"
				}
			}
		}
	}
	if vcsTime != "" {
		commit += " (" + vcsTime + ")"
	}
	if modified == "true" {
		commit += ", with uncommitted changes"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "etcdlock %s\n", version)
	fmt.Fprintf(&b, "module:      %s\n", module)
	fmt.Fprintf(&b, "library:     %s\n", lib)
	fmt.Fprintf(&b, "commit:      %s\n", commit)
	fmt.Fprintf(&b, "etcd client: %s\n", etcd)
	fmt.Fprintf(&b, "go:          %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of etcdlock, its commit, and the versions of etcd's client and Go",
		Long: `Print the version of etcdlock (the module version, "(devel)" for a build from
a checkout), the commit it was built from (unknown unless built with VCS
stamping), and the versions of etcd's client and of Go. Same as
'etcdlock --version'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.OutOrStdout(), versionText())
			return nil
		},
	}
}
