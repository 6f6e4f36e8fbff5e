package config

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// settings registers settings on a flag set: each with its flag, its
// environment variable, which the flag's help names, and its default. It
// collects the environment's errors, and the checks that run once the flags
// are parsed.
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
	checks []func() error
}

func newSettings(fs *flag.FlagSet, getenv func(string) string) *settings {
	return &settings{fs: fs, getenv: getenv}
}

// env returns the variable's value, or "" when it is unset.
func (s *settings) env(name string) string { return s.getenv(name) }

func (s *settings) str(p *string, name, env, def, help string) {
	*p = def
	if v := s.env(env); v != "" {
		*p = v
	}
	s.fs.StringVar(p, name, *p, help+" ("+env+")")
}

func (s *settings) list(p *[]string, name, env string, def []string, help string) {
	*p = def
	if v := s.env(env); v != "" {
		*p = splitList(v)
	}
	s.fs.Func(name, help+" ("+env+")", func(v string) error {
		*p = splitList(v)
		return nil
	})
	// flag.Func shows no default: say it in the help.
	if f := s.fs.Lookup(name); f != nil && len(def) > 0 {
		f.Usage += " (default " + strings.Join(def, ",") + ")"
	}
}

// duration registers a duration that must be above zero.
func (s *settings) duration(p *time.Duration, name, env string, def time.Duration, help string) {
	durationOf(s, p, name, env, def, false, help)
}

// nonNegativeDuration registers a duration that may be zero.
func (s *settings) nonNegativeDuration(p *time.Duration, name, env string, def time.Duration, help string) {
	durationOf(s, p, name, env, def, true, help)
}

// durationOf registers a duration, above zero unless zero is allowed.
func durationOf(s *settings, p *time.Duration, name, env string, def time.Duration, zero bool, help string) {
	want := "a positive duration such as 50ms"
	if zero {
		want = "a duration such as 50ms, or 0"
	}
	*p = def
	if v := s.env(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d == 0 && !zero {
			s.errs = append(s.errs, fmt.Errorf("%s: want %s, got %q", env, want, v))
		} else {
			*p = d
		}
	}
	s.fs.DurationVar(p, name, *p, help+" ("+env+")")
	if zero {
		s.check(func() error {
			if *p < 0 {
				return fmt.Errorf("%s: must not be negative, got %v", name, *p)
			}
			return nil
		})
	}
}

// positive registers an int that must be above zero.
func (s *settings) positive(p *int, name, env string, def int, help string) {
	number(s, p, name, env, def, 1, help)
}

// positive64 registers an int64 that must be above zero.
func (s *settings) positive64(p *int64, name, env string, def int64, help string) {
	number(s, p, name, env, def, 1, help)
}

// nonNegative registers an int that may be zero.
func (s *settings) nonNegative(p *int, name, env string, def int, help string) {
	number(s, p, name, env, def, 0, help)
}

// nonNegative64 registers an int64 that may be zero.
func (s *settings) nonNegative64(p *int64, name, env string, def int64, help string) {
	number(s, p, name, env, def, 0, help)
}

// number registers an integer of at least least, which is 0 or 1.
func number[T int | int64](s *settings, p *T, name, env string, def, least T, help string) {
	want, must := "a positive integer", "must be positive"
	if least == 0 {
		want, must = "a non-negative integer", "must not be negative"
	}
	*p = def
	if v := s.env(env); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || T(n) < least || int64(T(n)) != n {
			s.errs = append(s.errs, fmt.Errorf("%s: want %s, got %q", env, want, v))
		} else {
			*p = T(n)
		}
	}
	usage := help + " (" + env + ")"
	switch q := any(p).(type) {
	case *int:
		s.fs.IntVar(q, name, *q, usage)
	case *int64:
		s.fs.Int64Var(q, name, *q, usage)
	}
	s.check(func() error {
		if *p < least {
			return fmt.Errorf("%s: %s, got %d", name, must, *p)
		}
		return nil
	})
}

// enum registers a setting whose values are parsed by v.
func (s *settings) enum(v flag.Value, name, env, def, help string) {
	if err := v.Set(def); err != nil {
		panic(fmt.Sprintf("config: the default of %s does not parse: %v", name, err))
	}
	if e := s.env(env); e != "" {
		if err := v.Set(e); err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s: %w", env, err))
		}
	}
	s.fs.Var(v, name, help+" ("+env+")")
}

// check adds a check that runs once the flags are parsed.
func (s *settings) check(fn func() error) { s.checks = append(s.checks, fn) }

// validate runs the checks and returns their errors.
func (s *settings) validate() error {
	var errs []error
	for _, fn := range s.checks {
		if err := fn(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// enumValue is a flag.Value of a string type whose values parse checks.
type enumValue[T ~string] struct {
	p     *T
	parse func(string) (T, error)
}

func enumOf[T ~string](p *T, parse func(string) (T, error)) *enumValue[T] {
	return &enumValue[T]{p: p, parse: parse}
}

func (e *enumValue[T]) String() string {
	if e == nil || e.p == nil {
		return ""
	}
	return string(*e.p)
}

func (e *enumValue[T]) Set(s string) error {
	v, err := e.parse(s)
	if err != nil {
		return err
	}
	*e.p = v
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
