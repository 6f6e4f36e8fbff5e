package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// subcommandConfig parses a subcommand's own flags (fs, which may be nil)
// and the configuration, from args in any order. help is true when -h was
// asked for: the usage line and the subcommand's flags have been printed.
func subcommandConfig(cmd config.Command, usage string, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (cfg config.Config, help bool, err error) {
	if fs == nil {
		fs = flag.NewFlagSet("warmcache "+string(cmd), flag.ContinueOnError)
	}
	fs.SetOutput(stderr)
	rest, err := splitFlags(fs, args)
	if err != nil {
		return config.Config{}, false, err
	}
	cfg, err = config.Load(cmd, rest, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "usage: "+usage)
		fs.PrintDefaults()
		return config.Config{}, true, nil
	}
	return cfg, false, err
}

// isHelp reports whether arg asks for help, as the flag package reads it:
// -h, -help, --h or --help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help":
		return true
	}
	return false
}

// actionHelp prints the usage of a command with actions (migrate, dict):
// usage, then the flags of cmd, which config.Load prints for -h.
func actionHelp(cmd config.Command, usage string, getenv func(string) string, stderr io.Writer) error {
	fmt.Fprint(stderr, usage)
	if _, err := config.Load(cmd, []string{"-h"}, getenv, stderr); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil
}

// splitFlags takes the flags that fs defines out of args, wherever they
// are, parses them into fs, and returns the other arguments for the
// configuration's flag set: its flags first, then the positional arguments,
// so that "advise widgets --namespaces f" reads like "advise --namespaces f
// widgets". A flag of fs is "-name value", "-name=value"
// or, for a boolean, "-name", with one or two dashes.
func splitFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var own, rest, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case !strings.HasPrefix(a, "-") || a == "-":
			positional = append(positional, a)
			continue
		case a == "--":
			positional = append(positional, args[i:]...)
			i = len(args)
			continue
		case f == nil:
			// A configuration flag: every one of them takes a value.
			rest = append(rest, a)
			if !hasValue && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		own = append(own, a)
		isBool := false
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			isBool = true
		}
		if !hasValue && !isBool && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	if err := fs.Parse(own); err != nil {
		return nil, err
	}
	// The configuration's flags come first, so that its parser sees them
	// all; the positional arguments follow, in their order.
	return append(rest, positional...), nil
}

// namespace returns the namespace of cfg called name, or an error that
// wraps warmcache.ErrUnknownNamespace.
func namespace(cfg config.Config, name string) (*warmcache.Namespace, error) {
	for _, ns := range cfg.Namespaces {
		if ns.Name == name {
			return ns, nil
		}
	}
	return nil, fmt.Errorf("%w: %q is not in the configuration", warmcache.ErrUnknownNamespace, name)
}

// table returns the table of cfg's namespace called name, or an error that
// wraps warmcache.ErrUnknownNamespace.
func table(cfg config.Config, name string) (schema.Table, error) {
	for _, t := range cfg.Tables {
		if t.Namespace.Name == name {
			return t, nil
		}
	}
	return schema.Table{}, fmt.Errorf("%w: %q is not in the configuration", warmcache.ErrUnknownNamespace, name)
}
