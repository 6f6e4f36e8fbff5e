package localstack

import (
	"strings"
	"testing"
)

func TestAsRootRunsTheCommandItselfWithoutAPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix []string
		want   string
	}{
		{nil, "apt-get install -y pgbouncer"},
		{[]string{"sudo", "-n"}, "sudo -n apt-get install -y pgbouncer"},
	} {
		prefix := append([]string(nil), tc.prefix...)
		got := strings.Join(asRoot(prefix, "apt-get", "install", "-y", "pgbouncer"), " ")
		if got != tc.want {
			t.Errorf("asRoot(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
		if strings.Join(prefix, " ") != strings.Join(tc.prefix, " ") {
			t.Errorf("asRoot changed its prefix to %q", prefix)
		}
	}
}
