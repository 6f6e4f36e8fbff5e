package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// A subcommand's own flags are taken out of its arguments wherever they
// are; the configuration's flags come back first, with their values, and
// the positional arguments after them, in their order.
func TestSplitFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		rest    []string
		all     bool
		sample  int
		wantErr bool
	}{
		{name: "positional only", args: []string{"widgets", "7"}, rest: []string{"widgets", "7"}},
		{name: "own flags anywhere", args: []string{"widgets", "--all", "-sample", "5"}, rest: []string{"widgets"}, all: true, sample: 5},
		{name: "own flag with equals", args: []string{"--sample=9", "widgets"}, rest: []string{"widgets"}, sample: 9},
		{name: "config flags first", args: []string{"widgets", "--namespaces", "f.yaml", "--log-level=debug"},
			rest: []string{"--namespaces", "f.yaml", "--log-level=debug", "widgets"}},
		{name: "stdin dash is positional", args: []string{"widgets", "-"}, rest: []string{"widgets", "-"}},
		{name: "double dash ends flags", args: []string{"widgets", "--", "--all"}, rest: []string{"widgets", "--", "--all"}},
		{name: "bad value", args: []string{"--sample", "many"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			all := fs.Bool("all", false, "")
			sample := fs.Int("sample", 0, "")
			rest, err := splitFlags(fs, tc.args)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("splitFlags(%q) = %q, want an error", tc.args, rest)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rest, tc.rest) {
				t.Errorf("rest = %q, want %q", rest, tc.rest)
			}
			if *all != tc.all || *sample != tc.sample {
				t.Errorf("all, sample = %v, %d; want %v, %d", *all, *sample, tc.all, tc.sample)
			}
		})
	}
}

// -h prints the subcommand's usage and flags and is not an error.
func TestSubcommandConfigHelp(t *testing.T) {
	fs := flag.NewFlagSet("warmcache doctor", flag.ContinueOnError)
	fs.Bool("plans", false, "print every lookup plan")
	var out writeCounter
	_, help, err := subcommandConfig(config.DoctorCommand, "warmcache doctor [flags]", fs, []string{"-h"}, func(string) string { return "" }, &out)
	if err != nil || !help {
		t.Fatalf("subcommandConfig(-h) = help %v, err %v; want help and no error", help, err)
	}
	if out == 0 {
		t.Error("nothing printed for -h")
	}
}

// A namespace that the configuration lacks is reported as unknown, by the
// namespace and the table lookups alike.
func TestUnknownNamespace(t *testing.T) {
	var cfg config.Config
	if _, err := namespace(cfg, "nope"); !errors.Is(err, warmcache.ErrUnknownNamespace) {
		t.Errorf("namespace: %v, want ErrUnknownNamespace", err)
	}
	if _, err := table(cfg, "nope"); !errors.Is(err, warmcache.ErrUnknownNamespace) {
		t.Errorf("table: %v, want ErrUnknownNamespace", err)
	}
}

// A command run does not know is refused, and so is no command at all.
func TestRunRefusesUnknownCommands(t *testing.T) {
	for _, args := range [][]string{nil, {"serv"}} {
		if err := run(t.Context(), args, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

type writeCounter int

func (w *writeCounter) Write(p []byte) (int, error) {
	*w += writeCounter(len(p))
	return len(p), nil
}
