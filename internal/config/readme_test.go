package config_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// The configuration tables of docs/configuration.md list exactly the flags
// of the binary's commands, each with the environment variable the flag's
// help names: a flag added without a row, or a row left for a flag that is
// gone, fails here. Each default is in code format, as `8` or `auto`, or
// "empty".
func TestConfigurationDocListsEveryFlag(t *testing.T) {
	// PrintDefaults writes "  -name type" then an indented help line that
	// ends with "(WARMCACHE_...)".
	binary := map[string]string{}
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)`)
	envVar := regexp.MustCompile(`\((WARMCACHE_[A-Z0-9_]+)\)`)
	for _, cmd := range config.Commands() {
		var usage bytes.Buffer
		_, err := config.Load(cmd, []string{"-h"}, func(string) string { return "" }, &usage)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("Load %s -h: %v", cmd, err)
		}
		var last string
		sc := bufio.NewScanner(&usage)
		for sc.Scan() {
			line := sc.Text()
			if m := flagLine.FindStringSubmatch(line); m != nil {
				last = m[1]
				if _, seen := binary[last]; !seen {
					binary[last] = ""
				}
			}
			if m := envVar.FindStringSubmatch(line); m != nil && last != "" {
				if env := binary[last]; env != "" && env != m[1] {
					t.Errorf("--%s reads %s in one command and %s in another", last, env, m[1])
				}
				binary[last] = m[1]
			}
		}
	}
	if len(binary) < 20 {
		t.Fatalf("read only %d flags from the commands' usage: %v", len(binary), binary)
	}

	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	rowFlag := regexp.MustCompile("`--([a-z0-9-]+)`")
	rowVar := regexp.MustCompile("`(WARMCACHE_[A-Z0-9_]+)`")
	rowDefault := regexp.MustCompile("^(`|empty|for `)")
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Errorf("docs/configuration.md row %q has no variable and default", line)
			continue
		}
		if !rowDefault.MatchString(cells[2]) {
			t.Errorf("docs/configuration.md row %q: the default is not in code format (`value`) nor \"empty\"", cells[0])
		}
		flags := rowFlag.FindAllStringSubmatch(cells[0], -1)
		vars := rowVar.FindAllStringSubmatch(cells[1], -1)
		if len(flags) != len(vars) {
			t.Errorf("docs/configuration.md row %q: %d flags but %d variables", line, len(flags), len(vars))
			continue
		}
		for i, f := range flags {
			documented[f[1]] = vars[i][1]
		}
	}
	var missing, stale []string
	for name, env := range binary {
		doc, ok := documented[name]
		switch {
		case !ok:
			missing = append(missing, "--"+name)
		case doc != env:
			t.Errorf("docs/configuration.md gives --%s the variable %s; the binary reads %s", name, doc, env)
		}
	}
	for name := range documented {
		if _, ok := binary[name]; !ok {
			stale = append(stale, "--"+name)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	if len(missing) > 0 {
		t.Errorf("flags missing from the tables of docs/configuration.md: %s", strings.Join(missing, ", "))
	}
	if len(stale) > 0 {
		t.Errorf("docs/configuration.md lists flags the binary does not have: %s", strings.Join(stale, ", "))
	}
}
