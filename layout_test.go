// Package warmcache_test keeps the module's map from drifting away from the
// code: the README's layout lists every package and nothing that is gone,
// the binary's usage text and package comment name every subcommand its run
// dispatches, a package comment names no import the package lacks, the
// core's package comment names each of its files, and a link from a Go
// comment to a section of the docs reaches that section.
// Each failure says what to change. It needs no server.
package warmcache_test

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The tests below check the module as it is on disk, from its root (the
// directory of this file, where go test runs them).

func TestREADMELayoutListsEveryPackage(t *testing.T) {
	readme := readFile(t, "README.md")
	l, err := parseLayout(readme)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := packageDirs(".")
	if err != nil {
		t.Fatal(err)
	}
	rootGo, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkLayout(l, dirs, rootGo, diskTree{root: "."}) {
		t.Error(p)
	}
}

func TestSubcommandsAreInUsageAndPackageComment(t *testing.T) {
	const dir = "cmd/warmcache"
	fset := token.NewFileSet()
	files, err := parseNonTestFiles(fset, dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := readCommand(files)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	for _, p := range checkCommands(dir, src) {
		t.Error(p)
	}
}

func TestPackageCommentsNameOnlyTheirImports(t *testing.T) {
	mod := modulePath(t)
	dirs, err := packageDirs(".")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []pkgInfo
	for _, dir := range dirs {
		p, err := loadPackage(dir)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	for _, p := range checkImports(mod, pkgs) {
		t.Error(p)
	}
}

func TestCommentLinksReachTheirDocSection(t *testing.T) {
	dirs, err := packageDirs(".")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	readDoc := func(name string) (string, bool) {
		if text, ok := docs[name]; ok {
			return text, true
		}
		b, err := os.ReadFile(filepath.FromSlash(name))
		if err != nil {
			return "", false
		}
		docs[name] = string(b)
		return docs[name], true
	}
	for _, dir := range dirs {
		names, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range checkDocLinks(filepath.ToSlash(name), string(b), readDoc) {
				t.Error(p)
			}
		}
	}
}

// fileMaps are the packages whose package comment is a map of the package
// that names every one of its non-test files.
var fileMaps = []string{"internal/warmcache"}

func TestFileMapLayoutNamesEveryFile(t *testing.T) {
	for _, dir := range fileMaps {
		bp, err := build.Default.ImportDir(filepath.FromSlash(dir), 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := loadPackage(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, prob := range checkFileMap(p.docFile, p.doc, bp.GoFiles) {
			t.Error(prob)
		}
	}
}

func readFile(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// modulePath returns the module path that go.mod declares.
func modulePath(tb testing.TB) string {
	tb.Helper()
	sc := bufio.NewScanner(strings.NewReader(readFile(tb, "go.mod")))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	tb.Fatal("go.mod declares no module")
	return ""
}

// packageDirs returns, slash-separated and relative to root, every directory
// of the module that holds a .go file: the packages go list reports and the
// directories of tests only. It skips what the go command skips (testdata,
// directories whose names begin with . or _, vendor) and nested modules.
// The root itself is ".".
func packageDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel != "." {
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return fs.SkipDir
			}
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
				dirs = append(dirs, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	return dirs, err
}

// tree answers what checkLayout asks of the files: whether a path exists,
// and whether a directory holds Go files at or below it.
type tree interface {
	exists(rel string) bool
	holdsGo(rel string) bool
}

// diskTree is the tree on disk under root.
type diskTree struct{ root string }

func (d diskTree) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(d.root, filepath.FromSlash(rel)))
	return err == nil
}

func (d diskTree) holdsGo(rel string) bool {
	dirs, err := packageDirs(filepath.Join(d.root, filepath.FromSlash(rel)))
	return err == nil && len(dirs) > 0
}

// layout is what the README's layout section lists, as module-relative
// slash-separated paths; directories without their trailing slash.
type layout struct {
	dirs  []string
	files []string
}

// layoutHeading is the heading of the README's section that maps the tree.
const layoutHeading = "## Layout"

// parseLayout reads the first fenced block after the "## Layout" heading of
// readme. Each line of it names one entry, then describes it after spaces;
// a name ending in / is a directory, and a line indented further than the
// directory above it names an entry inside that directory. A line that
// starts in the column of the descriptions goes on describing the entry
// above it.
func parseLayout(readme string) (layout, error) {
	lines := strings.Split(readme, "\n")
	start := slices.Index(lines, layoutHeading)
	if start < 0 {
		return layout{}, fmt.Errorf("README.md has no %q section: add it, with the tree in a ``` block", layoutHeading)
	}
	i := start + 1
	for i < len(lines) && !strings.HasPrefix(lines[i], "```") {
		if strings.HasPrefix(lines[i], "#") {
			return layout{}, fmt.Errorf("README.md's %q section has no ``` block before the next heading", layoutHeading)
		}
		i++
	}
	if i == len(lines) {
		return layout{}, fmt.Errorf("README.md's %q section has no ``` block", layoutHeading)
	}
	type open struct {
		indent int
		path   string
	}
	var (
		l       layout
		stack   []open
		descCol int // where the last description began
	)
	for i++; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "```") {
			return l, nil
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.ContainsRune(line, '\t') {
			return layout{}, fmt.Errorf("README.md:%d: the layout is indented with spaces only; replace the tab", i+1)
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if descCol > 0 && indent >= descCol {
			continue
		}
		name := strings.Fields(line)[0]
		if rest := line[indent+len(name):]; strings.TrimSpace(rest) != "" {
			descCol = len(line) - len(strings.TrimLeft(rest, " "))
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		if indent > 0 && len(stack) == 0 {
			return layout{}, fmt.Errorf("README.md:%d: %s is indented but no directory line is above it", i+1, name)
		}
		p := name
		if len(stack) > 0 {
			p = stack[len(stack)-1].path + "/" + name
		}
		if dir, ok := strings.CutSuffix(p, "/"); ok {
			l.dirs = append(l.dirs, dir)
			stack = append(stack, open{indent: indent, path: dir})
		} else {
			l.files = append(l.files, p)
		}
	}
	return layout{}, fmt.Errorf("README.md's %q block is not closed with ```", layoutHeading)
}

// checkLayout returns what to fix so that l lists every directory of
// pkgDirs (with the directories above them) and every Go file of the root
// (rootGo), and names nothing that is gone: a path that does not exist, or
// a directory of cmd/ or internal/, where every directory is a package,
// that holds no Go file any more.
func checkLayout(l layout, pkgDirs, rootGo []string, t tree) []string {
	var problems []string
	listed := map[string]bool{}
	for _, d := range l.dirs {
		listed[d] = true
	}
	var need []string
	for _, d := range pkgDirs {
		for p := d; p != "." && p != "/" && p != ""; p = path.Dir(p) {
			if !slices.Contains(need, p) {
				need = append(need, p)
			}
		}
	}
	slices.Sort(need)
	for _, d := range need {
		if listed[d] {
			continue
		}
		what := "the package"
		if !slices.Contains(pkgDirs, d) {
			what = "the directory"
		}
		parent, name := path.Split(d)
		where := "at the top level, unindented"
		if parent != "" {
			where = fmt.Sprintf("under %s, indented two spaces more than it", parent)
		}
		problems = append(problems, fmt.Sprintf("README.md's layout (%s) lacks %s %s/: add a line %q %s",
			layoutHeading, what, d, name+"/   <what it holds>", where))
	}
	for _, f := range rootGo {
		if !slices.Contains(l.files, f) {
			problems = append(problems, fmt.Sprintf("README.md's layout (%s) lacks the root's Go file %s: add a line %q at the top level, unindented",
				layoutHeading, f, f+"   <what it checks>"))
		}
	}
	for _, d := range l.dirs {
		switch {
		case !t.exists(d):
			problems = append(problems, fmt.Sprintf("README.md's layout names %s/, which does not exist: remove its line, or correct the path", d))
		case (strings.HasPrefix(d, "cmd/") || strings.HasPrefix(d, "internal/")) && !t.holdsGo(d):
			problems = append(problems, fmt.Sprintf("README.md's layout names %s/, which holds no Go package any more: remove its line", d))
		}
	}
	for _, f := range l.files {
		if !t.exists(f) {
			problems = append(problems, fmt.Sprintf("README.md's layout names %s, which does not exist: remove its line, or correct the path", f))
		}
	}
	return problems
}

// parseNonTestFiles parses the Go files of dir, without its tests.
func parseNonTestFiles(fset *token.FileSet, dir string) ([]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// command is what checkCommands compares: the subcommands that the
// package's run dispatches, its usage text and its package comment.
type command struct {
	dispatched []string
	usage      string
	doc        string
}

// readCommand finds, in the files of a command's package, the function run
// and the subcommands its switch dispatches (the cases that pass args[1:]
// on), the constant usage, and the package comment.
func readCommand(files []*ast.File) (command, error) {
	var (
		c        command
		runFound bool
		usage    bool
	)
	for _, f := range files {
		if f.Doc != nil {
			c.doc += f.Doc.Text()
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil && decl.Name.Name == "run" && decl.Body != nil {
					runFound = true
					c.dispatched = append(c.dispatched, dispatched(decl.Body)...)
				}
			case *ast.GenDecl:
				if decl.Tok != token.CONST {
					continue
				}
				for _, spec := range decl.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if name.Name != "usage" || i >= len(vs.Values) {
							continue
						}
						text, err := constString(vs.Values[i])
						if err != nil {
							return command{}, fmt.Errorf("const usage: %w", err)
						}
						c.usage, usage = text, true
					}
				}
			}
		}
	}
	switch {
	case !runFound:
		return command{}, errors.New("no func run: the subcommands are read from run's switch")
	case len(c.dispatched) == 0:
		return command{}, errors.New("run's switch dispatches no subcommand (no case passes args[1:] on)")
	case !usage:
		return command{}, errors.New("no const usage: the usage text is read from it")
	}
	return c, nil
}

// dispatched returns the string cases of the switches in body whose
// clause calls something with args[1:].
func dispatched(body *ast.BlockStmt) []string {
	var names []string
	ast.Inspect(body, func(n ast.Node) bool {
		sw, ok := n.(*ast.SwitchStmt)
		if !ok {
			return true
		}
		for _, stmt := range sw.Body.List {
			cc := stmt.(*ast.CaseClause)
			if !passesRestOfArgs(cc) {
				continue
			}
			for _, e := range cc.List {
				if s, err := constString(e); err == nil {
					names = append(names, s)
				}
			}
		}
		return true
	})
	return names
}

// passesRestOfArgs reports whether the clause calls something with
// args[1:], the arguments after the subcommand's name.
func passesRestOfArgs(cc *ast.CaseClause) bool {
	found := false
	for _, stmt := range cc.Body {
		ast.Inspect(stmt, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return !found
			}
			for _, arg := range call.Args {
				se, ok := arg.(*ast.SliceExpr)
				if !ok || se.High != nil {
					continue
				}
				id, ok := se.X.(*ast.Ident)
				low, lok := se.Low.(*ast.BasicLit)
				if ok && id.Name == "args" && lok && low.Value == "1" {
					found = true
				}
			}
			return !found
		})
	}
	return found
}

// constString returns the value of a string literal, or of literals joined
// with +.
func constString(e ast.Expr) (string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", fmt.Errorf("not a string: %s", e.Value)
		}
		return strconv.Unquote(e.Value)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			break
		}
		x, err := constString(e.X)
		if err != nil {
			return "", err
		}
		y, err := constString(e.Y)
		if err != nil {
			return "", err
		}
		return x + y, nil
	case *ast.ParenExpr:
		return constString(e.X)
	}
	return "", errors.New("not a string literal")
}

// checkCommands returns what to fix so that the usage text lists, and the
// package comment names, every subcommand of c. The usage lists one on a
// line of its own, indented (as "  load <namespace>"); the package comment
// names one as "warmcache load", or on an indented line of its own.
func checkCommands(dir string, c command) []string {
	var problems []string
	bin := path.Base(dir)
	for _, name := range c.dispatched {
		q := regexp.QuoteMeta(name)
		inUsage := regexp.MustCompile(`(?m)^[ \t]+(` + regexp.QuoteMeta(bin) + `[ \t]+)?` + q + `\b`)
		inDoc := regexp.MustCompile(`(?m)\b` + regexp.QuoteMeta(bin) + `[ \t]+` + q + `\b|^[ \t]+` + q + `\b`)
		if !inUsage.MatchString(c.usage) {
			problems = append(problems, fmt.Sprintf("%s: run dispatches %q, which the usage text (const usage) does not list: add a line %q under its commands",
				dir, name, "  "+name+"   <what it does>"))
		}
		if !inDoc.MatchString(c.doc) {
			problems = append(problems, fmt.Sprintf("%s: run dispatches %q, which the package comment does not name: add a line %q beside the other subcommands",
				dir, name, "//\t"+bin+" "+name+"   <what it does>"))
		}
	}
	return problems
}

// pkgInfo is what checkImports needs of one package.
type pkgInfo struct {
	dir     string   // module-relative, slash-separated; "." for the root
	name    string   // the package name
	docFile string   // the file of the package comment, for messages
	doc     string   // the package comment
	imports []string // what the package imports; for a package of tests only, what its tests do
	// withTests is imports with those of the package's tests.
	withTests []string
	// testsOnly marks a package of tests only, which nothing imports.
	testsOnly bool
}

// loadPackage reads the package in dir (module-relative). For a package of
// tests only (no non-test file, or non-test files that hold only the
// package clause and its comment), the comment describes the tests, so
// their imports count.
func loadPackage(dir string) (pkgInfo, error) {
	bp, err := build.Default.ImportDir(filepath.FromSlash(dir), 0)
	var noGo *build.NoGoError
	if err != nil && !errors.As(err, &noGo) {
		return pkgInfo{}, fmt.Errorf("%s: %w", dir, err)
	}
	p := pkgInfo{dir: dir, name: bp.Name}
	fset := token.NewFileSet()
	p.testsOnly = true
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(filepath.FromSlash(dir), name), nil, parser.ParseComments)
		if err != nil {
			return pkgInfo{}, err
		}
		if len(f.Decls) > 0 {
			p.testsOnly = false
		}
		if f.Doc != nil {
			p.doc += f.Doc.Text()
			p.docFile = path.Join(dir, name)
		}
	}
	p.withTests = slices.Concat(bp.Imports, bp.TestImports, bp.XTestImports)
	p.imports = slices.Clone(bp.Imports)
	if p.testsOnly {
		p.imports = p.withTests
	}
	if len(bp.GoFiles) > 0 {
		return p, nil
	}
	for _, name := range slices.Concat(bp.TestGoFiles, bp.XTestGoFiles) {
		f, err := parser.ParseFile(fset, filepath.Join(filepath.FromSlash(dir), name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return pkgInfo{}, err
		}
		if f.Doc != nil {
			p.doc += f.Doc.Text()
			p.docFile = path.Join(dir, name)
		}
	}
	return p, nil
}

var (
	// externalPath is an import path outside the standard library: a
	// domain, then at least one element.
	externalPath = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,}(/[A-Za-z0-9_.~+-]+)+$`)
	// localPath is a module-relative directory, such as internal/pgstore.
	localPath = regexp.MustCompile(`^[a-z0-9_-]+(/[a-z0-9_-]+)+$`)
)

// docImports returns the import paths that a package comment names: paths
// outside the module (github.com/..., golang.org/x/...) and paths of the
// module's packages, module-relative (internal/testenv) or whole. isPkg
// tells the module's importable packages from other paths, such as files
// and directories of tests only. URLs are links, not imports, and are left
// out.
func docImports(doc, mod string, isPkg func(rel string) bool) []string {
	var paths []string
	add := func(p string) {
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	tokens := strings.FieldsFunc(doc, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune("()[]{}<>,;`'\"|", r)
	})
	for _, tok := range tokens {
		tok = strings.TrimRight(tok, ".:")
		switch {
		case strings.Contains(tok, "://") || strings.ContainsAny(tok, "#@"):
		case tok == mod:
		case strings.HasPrefix(tok, mod+"/"):
			if rel := strings.TrimPrefix(tok, mod+"/"); isPkg(rel) {
				add(tok)
			}
		case externalPath.MatchString(tok):
			add(tok)
		case localPath.MatchString(tok) && isPkg(tok):
			add(mod + "/" + tok)
		}
	}
	return paths
}

// checkImports returns what to fix so that no package comment of pkgs names
// an import its package does not have. A path outside the module must be
// imported by the package (a module's path, github.com/jackc/pgx, by any
// of its packages). A package of the module may also be named by a package
// it imports, or whose code or tests import it (the comment of
// internal/localstack may say that internal/testproc runs its servers), but
// not by an unrelated one.
func checkImports(mod string, pkgs []pkgInfo) []string {
	byDir := map[string]pkgInfo{}
	for _, p := range pkgs {
		if p.dir != "." && !p.testsOnly && p.name != "main" && p.name != "" {
			byDir[p.dir] = p
		}
	}
	isPkg := func(rel string) bool { _, ok := byDir[rel]; return ok }
	importPath := func(dir string) string {
		if dir == "." {
			return mod
		}
		return mod + "/" + dir
	}
	var problems []string
	for _, p := range pkgs {
		self := importPath(p.dir)
		for _, named := range docImports(p.doc, mod, isPkg) {
			imported := slices.ContainsFunc(p.imports, func(imp string) bool {
				return imp == named || strings.HasPrefix(imp, named+"/")
			})
			if named == self || imported {
				continue
			}
			if other, local := byDir[strings.TrimPrefix(named, mod+"/")]; local && strings.HasPrefix(named, mod+"/") &&
				(slices.Contains(p.withTests, named) || slices.Contains(other.withTests, self)) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: the package comment (%s) names %s, which the package does not import: remove %s from the comment, or reword it",
				p.dir, p.docFile, named, strings.TrimPrefix(named, mod+"/")))
		}
	}
	return problems
}

// goFile is the name of a Go file in a comment, such as read.go.
var goFile = regexp.MustCompile(`(?:^|[^\w/.-])([A-Za-z0-9_]+\.go)\b`)

// checkFileMap returns what to fix so that the package comment doc, in the
// file docFile, names each of files (the package's non-test Go files, other
// than docFile) and no Go file of the package that is not among them. Test
// files, named for where a check lives, are left out.
func checkFileMap(docFile, doc string, files []string) []string {
	named := map[string]bool{}
	for _, m := range goFile.FindAllStringSubmatch(doc, -1) {
		named[m[1]] = true
	}
	var problems []string
	for _, f := range files {
		if f != path.Base(docFile) && !named[f] {
			problems = append(problems, fmt.Sprintf("%s: the package comment does not name %s: add a line for it to the map", docFile, f))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(named)) {
		if !strings.HasSuffix(n, "_test.go") && !slices.Contains(files, n) {
			problems = append(problems, fmt.Sprintf("%s: the package comment names %s, which the package does not have: remove it from the map, or rename it", docFile, n))
		}
	}
	return problems
}

// docLink is a link to a Markdown file of the docs, with an optional
// section: docs/warehouse.md#the-lookup-function.
var docLink = regexp.MustCompile(`(?:^|[^\w/.-])((?:docs|loadtest)/[A-Za-z0-9_./-]*\.md)(#[A-Za-z0-9_-]+)?`)

// checkDocLinks returns what to fix so that every link in a comment of the
// Go file name (src) to a Markdown file of docs/ or loadtest/ names a file
// that readDoc finds and, after #, a heading of it, by its GitHub anchor.
func checkDocLinks(name, src string, readDoc func(name string) (string, bool)) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, group := range f.Comments {
		for _, c := range group.List {
			for i, line := range strings.Split(c.Text, "\n") {
				at := fmt.Sprintf("%s:%d", name, fset.Position(c.Pos()).Line+i)
				for _, m := range docLink.FindAllStringSubmatch(line, -1) {
					problems = append(problems, checkDocLink(at, m[1], strings.TrimPrefix(m[2], "#"), readDoc)...)
				}
			}
		}
	}
	return problems
}

// checkDocLink checks one link, found at at, to file#anchor.
func checkDocLink(at, file, anchor string, readDoc func(name string) (string, bool)) []string {
	doc, ok := readDoc(file)
	if !ok {
		return []string{fmt.Sprintf("%s: links %s, which does not exist: correct the path", at, file)}
	}
	if anchor == "" {
		return nil
	}
	anchors := headingAnchors(doc)
	if slices.Contains(anchors, anchor) {
		return nil
	}
	return []string{fmt.Sprintf("%s: links %s#%s, but %s has no such section: use one of its anchors (%s)",
		at, file, anchor, file, strings.Join(anchors, ", "))}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown document, in order: lower case, spaces as hyphens, punctuation
// other than - and _ dropped, and -1, -2, ... after a repeated one.
// Lines in fenced blocks are not headings.
func headingAnchors(doc string) []string {
	var (
		anchors []string
		seen    = map[string]int{}
		fenced  bool
	)
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimRight(line[level:], "#"))) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors = append(anchors, a)
	}
	return anchors
}
