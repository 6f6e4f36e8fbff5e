package warmcache_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// These tests feed the checkers of layout_test.go small trees, READMEs and
// sources in memory, so that each drift they must catch is shown caught
// without breaking the module.

// memTree is a tree of files in memory: the paths of its files.
type memTree []string

func (m memTree) exists(rel string) bool {
	return slices.ContainsFunc(m, func(f string) bool { return f == rel || strings.HasPrefix(f, rel+"/") })
}

func (m memTree) holdsGo(rel string) bool {
	return slices.ContainsFunc(m, func(f string) bool { return strings.HasPrefix(f, rel+"/") && strings.HasSuffix(f, ".go") })
}

const testREADME = "# x\n\n## Layout\n\n```\n" +
	"go.mod                    the module\n" +
	"map_test.go               the map's test, with a description\n" +
	"                          that goes on\n" +
	"cmd/\n" +
	"  tool/                   the binary\n" +
	"internal/\n" +
	"  core/                   the core\n" +
	"    kit/                  its test kit\n" +
	"  store/                  the store\n" +
	"                          and more of it\n" +
	"docs/                     the docs\n" +
	"```\n\n## Next\n"

func TestParseLayoutNestsByIndent(t *testing.T) {
	l, err := parseLayout(testREADME)
	if err != nil {
		t.Fatal(err)
	}
	wantDirs := []string{"cmd", "cmd/tool", "internal", "internal/core", "internal/core/kit", "internal/store", "docs"}
	if !slices.Equal(l.dirs, wantDirs) {
		t.Errorf("dirs = %q, want %q", l.dirs, wantDirs)
	}
	if want := []string{"go.mod", "map_test.go"}; !slices.Equal(l.files, want) {
		t.Errorf("files = %q, want %q", l.files, want)
	}
}

func TestParseLayoutRefusesWhatItCannotRead(t *testing.T) {
	for name, readme := range map[string]string{
		"no section":         "# x\n\n## Other\n\n```\ngo.mod  m\n```\n",
		"no block":           "## Layout\n\ntext\n\n## Next\n",
		"unclosed block":     "## Layout\n\n```\ngo.mod  m\n",
		"tab indent":         "## Layout\n\n```\ncmd/\n\ttool/  t\n```\n",
		"indented, no above": "## Layout\n\n```\n  tool/  t\n```\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseLayout(readme); err == nil {
				t.Errorf("parseLayout accepted %q", readme)
			}
		})
	}
}

func TestCheckLayout(t *testing.T) {
	l, err := parseLayout(testREADME)
	if err != nil {
		t.Fatal(err)
	}
	tree := memTree{"go.mod", "map_test.go", "cmd/tool/main.go", "internal/core/core.go",
		"internal/core/kit/kit.go", "internal/store/store.go", "docs/a.md"}
	pkgDirs := []string{".", "cmd/tool", "internal/core", "internal/core/kit", "internal/store"}

	if got := checkLayout(l, pkgDirs, []string{"map_test.go"}, tree); len(got) != 0 {
		t.Errorf("the layout matches the tree, but checkLayout says:\n%s", strings.Join(got, "\n"))
	}

	cases := []struct {
		name    string
		pkgDirs []string
		rootGo  []string
		tree    memTree
		want    []string
	}{{
		name:    "a package is missing",
		pkgDirs: append(slices.Clone(pkgDirs), "internal/cowmap"),
		tree:    append(slices.Clone(tree), "internal/cowmap/cowmap.go"),
		want:    []string{`lacks the package internal/cowmap/: add a line "cowmap/   <what it holds>" under internal/`},
	}, {
		name:    "a nested package is missing",
		pkgDirs: append(slices.Clone(pkgDirs), "internal/store/gen"),
		tree:    append(slices.Clone(tree), "internal/store/gen/gen.go"),
		want:    []string{`lacks the package internal/store/gen/: add a line "gen/   <what it holds>" under internal/store/`},
	}, {
		name:    "a new top-level directory of packages is missing",
		pkgDirs: append(slices.Clone(pkgDirs), "e2e/fault"),
		tree:    append(slices.Clone(tree), "e2e/fault/fault_test.go"),
		want: []string{
			`lacks the directory e2e/: add a line "e2e/   <what it holds>" at the top level`,
			`lacks the package e2e/fault/: add a line "fault/   <what it holds>" under e2e/`,
		},
	}, {
		name:   "a Go file of the root is missing",
		rootGo: []string{"map_test.go", "other_test.go"},
		tree:   append(slices.Clone(tree), "other_test.go"),
		want:   []string{`lacks the root's Go file other_test.go`},
	}, {
		name:    "a listed package is gone",
		pkgDirs: []string{".", "cmd/tool", "internal/core", "internal/core/kit"},
		tree:    memTree{"go.mod", "map_test.go", "cmd/tool/main.go", "internal/core/core.go", "internal/core/kit/kit.go", "docs/a.md"},
		want:    []string{"names internal/store/, which does not exist: remove its line"},
	}, {
		name:    "a listed package holds no Go any more",
		pkgDirs: []string{".", "cmd/tool", "internal/core", "internal/core/kit"},
		tree:    memTree{"go.mod", "map_test.go", "cmd/tool/main.go", "internal/core/core.go", "internal/core/kit/kit.go", "internal/store/testdata/x.json", "docs/a.md"},
		want:    []string{"names internal/store/, which holds no Go package any more: remove its line"},
	}, {
		name: "a listed file is gone",
		tree: memTree{"map_test.go", "cmd/tool/main.go", "internal/core/core.go", "internal/core/kit/kit.go", "internal/store/store.go", "docs/a.md"},
		want: []string{"names go.mod, which does not exist"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.pkgDirs == nil {
				c.pkgDirs = pkgDirs
			}
			if c.rootGo == nil {
				c.rootGo = []string{"map_test.go"}
			}
			got := checkLayout(l, c.pkgDirs, c.rootGo, c.tree)
			assertProblems(t, got, c.want)
		})
	}
}

// assertProblems checks that problems holds one problem containing each of
// want, in order, and nothing else.
func assertProblems(t *testing.T, problems, want []string) {
	t.Helper()
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d = %q, want it to contain %q", i, problems[i], w)
		}
	}
}

const testMain = `// Command tool does things.
//
//	tool serve     run it
//	tool load      load it
package main

func main() {}

const usage = "usage: tool <command>\n\ncommands:\n" +
	"  serve   run it\n" +
	"  load <file>\n" +
	"          load it\n"

func run(args []string) error {
	if len(args) == 0 {
		return nil
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "load", "import":
		return load(args[1:])
	case "help", "-h":
		return nil
	}
	return nil
}
`

func parseTestMain(t *testing.T, src string) command {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	c, err := readCommand([]*ast.File{f})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReadCommandFindsTheDispatchedCases(t *testing.T) {
	c := parseTestMain(t, testMain)
	if want := []string{"serve", "load", "import"}; !slices.Equal(c.dispatched, want) {
		t.Errorf("dispatched = %q, want %q: help is answered, not dispatched", c.dispatched, want)
	}
	if !strings.Contains(c.usage, "  load <file>\n") {
		t.Errorf("usage = %q, want the constant joined", c.usage)
	}
	if !strings.Contains(c.doc, "tool serve") {
		t.Errorf("doc = %q, want the package comment", c.doc)
	}
}

func TestReadCommandRefusesWhatItCannotRead(t *testing.T) {
	for name, src := range map[string]string{
		"no run":      "package main\n\nconst usage = \"u\"\n",
		"no usage":    "package main\n\nfunc run(args []string) error {\n\tswitch args[0] {\n\tcase \"a\":\n\t\treturn a(args[1:])\n\t}\n\treturn nil\n}\n",
		"no dispatch": "package main\n\nconst usage = \"u\"\n\nfunc run(args []string) error {\n\tswitch args[0] {\n\tcase \"a\":\n\t\treturn nil\n\t}\n\treturn nil\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readCommand([]*ast.File{f}); err == nil {
				t.Errorf("readCommand accepted %q", src)
			}
		})
	}
}

func TestCheckCommands(t *testing.T) {
	c := parseTestMain(t, testMain)
	// "import" is an alias that neither text names.
	assertProblems(t, checkCommands("cmd/tool", c), []string{
		`cmd/tool: run dispatches "import", which the usage text (const usage) does not list: add a line "  import   <what it does>"`,
		`cmd/tool: run dispatches "import", which the package comment does not name: add a line "//\ttool import   <what it does>"`,
	})

	c.dispatched = []string{"serve", "load"}
	assertProblems(t, checkCommands("cmd/tool", c), nil)

	// A word inside another is not the subcommand: "loader", "download".
	c.usage = "usage: tool\n\n  serve   run it\n  loader  x\n  download y\n"
	c.doc = "Command tool serves; it is a downloader.\n\n\ttool serve  run it\n"
	assertProblems(t, checkCommands("cmd/tool", c), []string{
		`run dispatches "load", which the usage text`,
		`run dispatches "load", which the package comment does not name`,
	})

	// The package comment may name one as "tool load" in prose, or list it
	// bare on an indented line.
	c.usage = "  serve\n  load\n"
	c.doc = "Run `tool load` to load.\n\n\tserve  run it\n"
	assertProblems(t, checkCommands("cmd/tool", c), nil)
}

func TestDocImports(t *testing.T) {
	const mod = "example.com/m"
	isPkg := func(rel string) bool { return rel == "internal/store" || rel == "internal/testenv" }
	doc := "Package core depends on the standard library, golang.org/x/sync and " +
		"github.com/jackc/pgx only (see https://github.com/jackc/pgx/issues/1 and golang/go#75804). " +
		"It is tested with internal/testenv's servers; internal/store/store.go and internal/{a,b} are files; " +
		"example.com/m/internal/store is whole; rows/s is a unit; docs/x.md is a doc."
	got := docImports(doc, mod, isPkg)
	want := []string{"golang.org/x/sync", "github.com/jackc/pgx", "example.com/m/internal/testenv", "example.com/m/internal/store"}
	if !slices.Equal(got, want) {
		t.Errorf("docImports = %q, want %q", got, want)
	}
}

func TestCheckImports(t *testing.T) {
	const mod = "example.com/m"
	pkgs := []pkgInfo{{
		dir:     "internal/core",
		name:    "core",
		docFile: "internal/core/doc.go",
		doc:     "Package core depends on golang.org/x/sync and github.com/jackc/pgx; internal/store implements it, and internal/other is unrelated.",
		imports: []string{"context", "github.com/jackc/pgx/v5/pgxpool"},
	}, {
		dir:       "internal/store",
		name:      "store",
		imports:   []string{"example.com/m/internal/core"},
		withTests: []string{"example.com/m/internal/core"},
	}, {
		dir:  "internal/other",
		name: "other",
	}, {
		dir:       "internal/kit",
		name:      "kit",
		doc:       "Package kit starts servers; internal/proc runs them, and its tests use internal/other.",
		imports:   nil,
		withTests: []string{"example.com/m/internal/other"},
	}, {
		dir:       "internal/proc",
		name:      "proc",
		withTests: []string{"example.com/m/internal/kit"},
	}}
	assertProblems(t, checkImports(mod, pkgs), []string{
		"internal/core: the package comment (internal/core/doc.go) names golang.org/x/sync, which the package does not import: remove golang.org/x/sync from the comment",
		"internal/core: the package comment (internal/core/doc.go) names example.com/m/internal/other, which the package does not import: remove internal/other from the comment",
	})
}

func TestCheckFileMapLayout(t *testing.T) {
	doc := "Package core answers keys.\n\nWhere things are (layout_test.go holds this list):\n" +
		"  - read.go: the read path; flight.go: misses shared.\n" +
		"  - gone.go: a file since removed; internal/x/y.go is elsewhere.\n"
	files := []string{"doc.go", "read.go", "flight.go", "write.go"}
	assertProblems(t, checkFileMap("internal/core/doc.go", doc, files), []string{
		"internal/core/doc.go: the package comment does not name write.go: add a line for it to the map",
		"internal/core/doc.go: the package comment names gone.go, which the package does not have",
	})
	if p := checkFileMap("internal/core/doc.go", doc+"  - write.go: writes.\n", files[:3]); len(p) != 2 {
		t.Errorf("a named file missing from the package: got %q, want write.go and gone.go reported", p)
	}
}

func TestCheckDocLinks(t *testing.T) {
	docs := map[string]string{
		"docs/warehouse.md": "# The warehouse\n\n## Greenplum, measured\n\n```\n# not a heading\n```\n\n### The `lookup` function\n\n## Notes\n\n## Notes\n",
	}
	readDoc := func(name string) (string, bool) { d, ok := docs[name]; return d, ok }
	src := strings.Join([]string{
		"package x",
		"",
		"// See docs/warehouse.md#greenplum-measured and docs/warehouse.md#the-lookup-function,",
		"// docs/warehouse.md#notes-1 and docs/warehouse.md.",
		"// Broken: docs/warehouse.md#the-lookup-functions, docs/gone.md, docs/warehouse.md#not-a-heading.",
		`var readme = "docs/elsewhere.md" // in a string, not a link`,
		"/* docs/gone.md#a in a block */",
	}, "\n")
	assertProblems(t, checkDocLinks("x.go", src, readDoc), []string{
		"x.go:5: links docs/warehouse.md#the-lookup-functions, but docs/warehouse.md has no such section: use one of its anchors (the-warehouse, greenplum-measured, the-lookup-function, notes, notes-1)",
		"x.go:5: links docs/gone.md, which does not exist",
		"x.go:5: links docs/warehouse.md#not-a-heading, but",
		"x.go:7: links docs/gone.md, which does not exist",
	})
}
