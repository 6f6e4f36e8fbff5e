package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
)

// warmcacheBin is the warmcache binary that TestMain builds: the pages'
// `warmcache` and `bin/warmcache`.
var warmcacheBin string

func TestMain(m *testing.M) { harness.Main(m, "docs", &warmcacheBin) }

// root is the repository's root, from this package's folder.
const root = "../.."

// block is one fenced code block of a page.
type block struct {
	page string // the path from the root
	line int    // the line of the opening fence
	info string // the info string: sh, text, yaml...
	text string
	// skip is the reason of a <!-- docs-test: skip REASON --> line directly
	// before the fence; empty when the block runs.
	skip string
}

func (b block) name() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

var (
	skipMarker = regexp.MustCompile(`^<!--\s*docs-test:\s*skip\s+(.+?)\s*-->$`)
	anyMarker  = regexp.MustCompile(`^<!--\s*docs-test`)
	// expectMark is a command's expected status: "# → 404" in its comment.
	expectMark = regexp.MustCompile(`#.*→\s*([1-5][0-9][0-9])\b`)
)

// blocks reads the fenced code blocks of a page. A docs-test comment (a
// line that begins with "<!-- docs-test") anywhere but directly before an
// sh fence is an error, so that a marker cannot drift from its block
// unseen; text that quotes the marker is not one.
func blocks(dir, page string) ([]block, error) {
	f, err := os.Open(filepath.Join(dir, page))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out    []block
		cur    *block
		body   strings.Builder
		marker string // the reason of a skip marker on the line before
		at     int    // the marker's line
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == "```" {
				cur.text = body.String()
				out = append(out, *cur)
				cur = nil
			} else {
				body.WriteString(line)
				body.WriteByte('\n')
			}
			continue
		}
		if marker != "" && !strings.HasPrefix(trimmed, "```") {
			return nil, fmt.Errorf("%s:%d: a docs-test marker that is not directly before a fence", page, at)
		}
		switch {
		case strings.HasPrefix(trimmed, "```"):
			cur = &block{page: page, line: n, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), skip: marker}
			body.Reset()
			if marker != "" && cur.info != "sh" {
				return nil, fmt.Errorf("%s:%d: a docs-test marker before a %q block; only sh blocks run", page, at, cur.info)
			}
			marker = ""
		case skipMarker.MatchString(trimmed):
			marker, at = skipMarker.FindStringSubmatch(trimmed)[1], n
		case strings.HasPrefix(trimmed, "<!--") && anyMarker.MatchString(trimmed):
			return nil, fmt.Errorf("%s:%d: a docs-test comment that is not <!-- docs-test: skip REASON -->", page, n)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fence that is never closed", page, cur.line)
	}
	return out, sc.Err()
}

// pages are the pages whose examples run, in order: README.md, then
// docs/*.md by name.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(docs)
	list := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		list = append(list, rel)
	}
	return list
}

// prelude is what every block runs after: the shell's strictness and the
// wrappers that check answers and point the pages' commands at the served
// stack.
//
//   - curl prints what the real curl would, and fails unless the answer's
//     status is 2xx or 3xx, or, when the line's comment says "# → NNN",
//     that status. Each status is printed as "docs-test: HTTP NNN" on
//     stderr.
//   - psql keeps its options but connects to the test's database,
//     whatever -h, -p, -U and the database name say.
//   - warmcache (and bin/warmcache) is the built binary, on the test's
//     database and Redis prefix.
const prelude = `set -euo pipefail
curl() {
	local out status rc=0
	out=$(mktemp)
	status=$(command curl --no-progress-meter "$@" -o "$out" -w '%{http_code}') || rc=$?
	cat "$out"
	rm -f "$out"
	if [ "$rc" != 0 ]; then echo "docs-test: curl failed ($rc)" >&2; return "$rc"; fi
	echo "docs-test: HTTP $status" >&2
	if [ -n "${DOCS_EXPECT:-}" ]; then
		[ "$status" = "$DOCS_EXPECT" ] || { echo "docs-test: HTTP $status, want $DOCS_EXPECT" >&2; return 1; }
	elif [ "$status" -lt 200 ] || [ "$status" -ge 400 ]; then
		echo "docs-test: HTTP $status, want 2xx or 3xx (or mark the line # → $status)" >&2; return 1
	fi
}
psql() {
	local args=()
	while [ $# -gt 0 ]; do
		case "$1" in
		-h|-p|-U|-d) shift 2 ;;
		-c|-f|-v) args+=("$1" "$2"); shift 2 ;;
		-*) args+=("$1"); shift ;;
		*) shift ;;
		esac
	done
	command psql -v ON_ERROR_STOP=1 "$DOCS_PG_DSN" "${args[@]}"
}
warmcache() { "$DOCS_WARMCACHE" "$@"; }
`

// script is a block's text as the test runs it: the served addresses for
// the documented ones, the built binary for bin/warmcache, the socket
// folder for /var/run/warmcache, and each "# → NNN" turned into the
// expectation of its command's curl.
func script(text string, subst *strings.Replacer) string {
	lines := strings.Split(subst.Replace(text), "\n")
	start := 0 // the first line of the current command
	for i, l := range lines {
		if m := expectMark.FindStringSubmatch(l); m != nil {
			lines[start] = "DOCS_EXPECT=" + m[1] + " " + strings.TrimLeft(lines[start], " \t")
		}
		if !strings.HasSuffix(l, `\`) {
			start = i + 1
		}
	}
	return prelude + strings.Join(lines, "\n")
}

// TestDocs runs every sh block of README.md and docs/*.md, page by page,
// in order, against one served stack (the namespaces of make run, a fresh
// database with 1,000 widgets, Redis under a prefix of its own); a block
// marked <!-- docs-test: skip REASON --> is listed as skipped with its
// reason. Each block runs in bash in one working folder that the blocks
// share (the repository's root), with TOKEN set; it fails when a command fails or an answer has
// another status than its line expects.
func TestDocs(t *testing.T) {
	var all []block
	for _, p := range pages(t) {
		bs, err := blocks(root, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.info == "sh" {
				all = append(all, b)
			}
		}
	}
	if len(all) == 0 {
		t.Fatal("no sh blocks found")
	}

	dsn := testenv.NewDatabase(t)
	namespaces, err := filepath.Abs(filepath.Join(root, "deploy", "local", "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	migrate := map[string]string{"WARMCACHE_POSTGRES_DSN": dsn, "WARMCACHE_NAMESPACES_FILE": namespaces}
	var out, errOut bytes.Buffer
	if err := harness.Run(context.Background(), warmcacheBin, []string{"migrate", "up"}, migrate, &out, &errOut); err != nil {
		t.Fatalf("migrate up: %v\n%s%s", err, out.String(), errOut.String())
	}
	harness.SeedWidgets(t, dsn, 1000)
	sockets := harness.SocketDir(t, "docs")
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN":    dsn,
		"WARMCACHE_NAMESPACES_FILE": namespaces,
		"WARMCACHE_REDIS_ADDRS":     testenv.RedisAddr(t),
		"WARMCACHE_REDIS_PREFIX":    "docs-" + testenv.RandomSuffix(t) + ":",
		// The pages' first GET expects a fill to reach Redis, so that the
		// next is a hit; the machine that runs the suite is busy.
		"WARMCACHE_HOT_TIMEOUT": "1s",
	}
	s := harness.Serve(t, env, 4, "--http-socket", filepath.Join(sockets, "http.sock"), "--grpc-socket", filepath.Join(sockets, "grpc.sock"))
	httpAddr := strings.TrimPrefix(s.HTTP, "http://")
	subst := strings.NewReplacer(
		"127.0.0.1:8080", httpAddr,
		"127.0.0.1:9090", s.GRPC,
		"/var/run/warmcache/", sockets+"/",
		"bin/warmcache ", "warmcache ",
	)

	// The pages' commands run from the repository's root, as a reader
	// runs them; HOME is a folder of the test's own.
	work, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	token := make([]byte, 32)
	_, _ = rand.Read(token)
	sum := sha256.Sum256(token)
	environ := append(harness.Environ(env),
		"PATH="+os.Getenv("PATH"), "HOME="+t.TempDir(), "TMPDIR="+os.TempDir(),
		"DOCS_PG_DSN="+dsn, "DOCS_WARMCACHE="+warmcacheBin,
		"TOKEN="+hex.EncodeToString(token), "DOCS_TOKEN_SHA256="+hex.EncodeToString(sum[:]))

	var ran, skipped []string
	for _, b := range all {
		t.Run(b.name(), func(t *testing.T) {
			if b.skip != "" {
				skipped = append(skipped, b.name()+": "+b.skip)
				t.Skip("docs-test: skip " + b.skip)
			}
			ran = append(ran, b.name())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", script(b.text, subst))
			cmd.Dir = work
			cmd.Env = environ
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			statuses := regexp.MustCompile(`docs-test: HTTP [0-9]+`).FindAllString(stderr.String(), -1)
			if err != nil {
				t.Fatalf("%s failed: %v\n--- block\n%s--- stdout\n%s--- stderr\n%s", b.name(), err, b.text, stdout.String(), stderr.String())
			}
			t.Logf("%s: %d answers checked %q", b.name(), len(statuses), statuses)
		})
	}
	t.Logf("ran %d blocks: %s", len(ran), strings.Join(ran, ", "))
	t.Logf("skipped %d blocks:\n  %s", len(skipped), strings.Join(skipped, "\n  "))
}
