package config

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ApplicationName is the application_name of every warehouse session the
// service opens when neither its DSN nor PGAPPNAME names one. The doctor
// counts the fleet's sessions by it (pg_stat_activity.application_name),
// so the instances of one fleet must share it.
const ApplicationName = "warmcache"

// withApplicationName returns dsn with application_name=ApplicationName
// added, unless it names one already, PGAPPNAME names one, or it does not
// parse (its error comes where it is used). It takes both forms of a DSN:
// a URL gets a query parameter, a keyword/value string one more pair.
func withApplicationName(dsn string, getenv func(string) string) string {
	if dsn == "" || getenv("PGAPPNAME") != "" {
		return dsn
	}
	cc, err := pgconn.ParseConfig(dsn)
	if err != nil || cc.RuntimeParams["application_name"] != "" {
		return dsn
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " application_name=" + ApplicationName
	}
	base, fragment, _ := strings.Cut(dsn, "#")
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
		if strings.HasSuffix(base, "?") || strings.HasSuffix(base, "&") {
			sep = ""
		}
	}
	out := base + sep + "application_name=" + ApplicationName
	if fragment != "" {
		out += "#" + fragment
	}
	return out
}
