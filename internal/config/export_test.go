package config

import "flag"

// Flags returns every flag that some command registers, once each, with
// its default.
func Flags() []*flag.Flag {
	seen := map[string]bool{}
	var out []*flag.Flag
	for _, cmd := range Commands() {
		var c Config
		fs := flag.NewFlagSet(string(cmd), flag.ContinueOnError)
		s := newSettings(fs, func(string) string { return "" })
		for _, g := range cmd.groups() {
			g(&c, s)
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, f)
			}
		})
	}
	return out
}
