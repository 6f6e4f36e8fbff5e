// Package schema creates and drops warmcache's tables: the version sequence
// and the table of every managed namespace, with the namespace's storage
// options, on PostgreSQL or Greenplum.
//
// Plan renders the versioned SQL templates of package migrations for a
// dialect without touching a database, and Render prints the result for
// review (warmcache migrate plan). A Migrator applies and reverts the steps
// on a server and records them in the table warmcache_schema_migrations.
package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/migrations"
)

// Step is one migration for one scope, rendered for a dialect.
type Step struct {
	// Version orders the steps; Up applies them by ascending version.
	Version int
	// Name is the migration's name, such as "namespace_table".
	Name string
	// Scope is empty for a migration that runs once for the database, or
	// the namespace's name for one that runs per managed namespace.
	Scope string
	// Up and Down are the SQL that apply and revert the step. They may hold
	// several statements.
	Up   string
	Down string
}

// Label returns the step as the plan shows it, such as
// "0002 namespace_table (widgets)" or "0001 version_sequence".
func (s Step) Label() string {
	l := fmt.Sprintf("%04d %s", s.Version, s.Name)
	if s.Scope != "" {
		l += " (" + s.Scope + ")"
	}
	return l
}

// namespacePrefix marks a migration that runs once per managed namespace.
const namespacePrefix = "namespace_"

// Plan renders every migration for the dialect: the global ones once, and
// the per-namespace ones once for each table with Managed set, in the
// order of tables. Tables without Managed are left alone and not checked.
// Steps come by ascending version.
//
// Plan connects to nothing. It fails when a managed namespace cannot be
// created on the dialect; the error names every bad field as
// `namespace "widgets": storage.orientation: must be row or column, got "diagonal"`.
func Plan(d dialect.Dialect, tables []Table) ([]Step, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("schema: plan: unknown dialect %v", d)
	}
	var data []tableData
	var errs []error
	names := map[string]bool{}
	tableOf := map[string]string{}
	for i, tb := range tables {
		ns := tb.Namespace
		if ns == nil {
			errs = append(errs, fmt.Errorf("schema: namespaces[%d] is nil", i))
			continue
		}
		if !tb.Managed {
			continue
		}
		if ns.Name == "" {
			errs = append(errs, fmt.Errorf("schema: namespaces[%d]: name: must not be empty", i))
			continue
		}
		if names[ns.Name] {
			errs = append(errs, fmt.Errorf("schema: namespace %q: name: declared twice", ns.Name))
			continue
		}
		names[ns.Name] = true
		if other, ok := tableOf[ns.Table]; ok {
			errs = append(errs, fmt.Errorf("schema: namespace %q: table: %q is also the table of namespace %q", ns.Name, ns.Table, other))
			continue
		}
		tableOf[ns.Table] = ns.Name
		t, err := tableFor(d, tb)
		if err != nil {
			errs = append(errs, prefixEach(fmt.Sprintf("schema: namespace %q: ", ns.Name), err))
			continue
		}
		t.Dialect = d.String()
		data = append(data, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	migs, err := load(migrations.FS())
	if err != nil {
		return nil, err
	}
	var steps []Step
	for _, m := range migs {
		if !strings.HasPrefix(m.name, namespacePrefix) {
			s, err := m.render("", struct{ Dialect string }{d.String()})
			if err != nil {
				return nil, err
			}
			steps = append(steps, s)
			continue
		}
		for _, t := range data {
			s, err := m.render(t.Namespace, t)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s)
		}
	}
	return steps, nil
}

// Render returns the Up SQL of the steps as one script for review, each
// step headed by a comment with its label, such as
// "-- 0002 namespace_table (widgets)".
func Render(steps []Step) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "-- %s\n%s", s.Label(), s.Up)
	}
	return b.String()
}

// prefixEach prefixes every error joined in err, so that each line of the
// message names the namespace.
func prefixEach(prefix string, err error) error {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return fmt.Errorf("%s%w", prefix, err)
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, fmt.Errorf("%s%w", prefix, e))
	}
	return errors.Join(out...)
}

// migration is one version's pair of templates.
type migration struct {
	version  int
	name     string
	up, down *template.Template
}

// render executes the migration's templates with data.
func (m migration) render(scope string, data any) (Step, error) {
	s := Step{Version: m.version, Name: m.name, Scope: scope}
	var err error
	if s.Up, err = execute(m.up, data); err != nil {
		return Step{}, fmt.Errorf("schema: render %s: %w", s.Label(), err)
	}
	if s.Down, err = execute(m.down, data); err != nil {
		return Step{}, fmt.Errorf("schema: render %s: %w", s.Label(), err)
	}
	return s, nil
}

// execute runs a template and returns its text, trimmed and ending with one
// newline.
func execute(t *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()) + "\n", nil
}

// load parses the migration templates of fsys, named NNNN_name.up.sql and
// NNNN_name.down.sql, and returns them by ascending version.
func load(fsys fs.FS) ([]migration, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("schema: migrations: %w", err)
	}
	byVersion := map[int]*migration{}
	for _, f := range files {
		base, direction, ok := cutDirection(f)
		vs, name, ok2 := strings.Cut(base, "_")
		version, err := strconv.Atoi(vs)
		if !ok || !ok2 || err != nil || len(vs) != 4 || version < 1 || name == "" {
			return nil, fmt.Errorf("schema: migrations: %s: want NNNN_name.up.sql or NNNN_name.down.sql", f)
		}
		text, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("schema: migrations: %w", err)
		}
		t, err := template.New(path.Base(f)).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("schema: migrations: %w", err)
		}
		m := byVersion[version]
		if m == nil {
			m = &migration{version: version, name: name}
			byVersion[version] = m
		}
		if m.name != name {
			return nil, fmt.Errorf("schema: migrations: version %04d has two names, %s and %s", version, m.name, name)
		}
		if direction == "up" {
			m.up = t
		} else {
			m.down = t
		}
	}
	var out []migration
	for _, m := range byVersion {
		if m.up == nil || m.down == nil {
			return nil, fmt.Errorf("schema: migrations: %04d_%s needs both .up.sql and .down.sql", m.version, m.name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// cutDirection splits "0001_x.up.sql" into "0001_x" and "up".
func cutDirection(file string) (base, direction string, ok bool) {
	if base, ok = strings.CutSuffix(file, ".up.sql"); ok {
		return base, "up", true
	}
	if base, ok = strings.CutSuffix(file, ".down.sql"); ok {
		return base, "down", true
	}
	return "", "", false
}
