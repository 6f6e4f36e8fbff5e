package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestSubcommandHelp checks that -h, -help and --help work on every
// subcommand and action, before anything is opened: run returns no error
// and prints the subcommand's usage line and its flags, whatever the
// environment holds (nothing here, so a command that tried to connect or
// serve would fail).
func TestSubcommandHelp(t *testing.T) {
	for _, sub := range [][]string{
		{"serve"},
		{"migrate"}, {"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"}, {"migrate", "plan"},
		{"dict"}, {"dict", "train"}, {"dict", "list"},
		{"doctor"},
		{"load"},
		{"advise"},
		{"invalidate"},
	} {
		for _, flag := range []string{"-h", "-help", "--help"} {
			args := append(append([]string(nil), sub...), flag)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // a command that went past its help would stop at once
				var out, errOut bytes.Buffer
				if err := run(ctx, args, getenv(nil), &out, &errOut); err != nil {
					t.Fatalf("run(%q) = %v; want its help and no error\nstderr: %s", args, err, errOut.String())
				}
				help := out.String() + errOut.String()
				if want := "warmcache " + sub[0]; !strings.Contains(help, want) {
					t.Errorf("run(%q) printed %q; want its usage, with %q", args, help, want)
				}
				if !strings.Contains(help, "\n  -") {
					t.Errorf("run(%q) printed %q; want its flags", args, help)
				}
			})
		}
	}
}
