package grpcapi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/warmcache/warmcache/internal/testenv"
)

// protocVersionLine is the line of a generated file that names the protoc
// release, which may differ between machines without the code differing.
var protocVersionLine = regexp.MustCompile(`(?m)^//\s+(- )?protoc\s+v\S+\n`)

// TestGeneratedCodeIsCurrent regenerates the code of internal/grpcapi/proto/ into a
// temporary directory, with the pinned plugins, and fails when the
// committed code differs: run `make proto` and commit the result.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		testenv.Unavailable(t, "protoc is not installed (apt-get install protobuf-compiler); cannot check the generated code")
	}
	if testing.Short() {
		t.Skip("-short: regenerating the code builds the protoc plugins")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "internal", "grpcapi", "proto", "gen.sh"), out)
	cmd.Env = append(os.Environ(), "BIN_DIR="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("internal/grpcapi/proto/gen.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"warmcache.pb.go", "warmcache_grpc.pb.go"} {
		rel := filepath.Join("internal", "grpcapi", "warmcachev1", name)
		fresh, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if protocVersionLine.ReplaceAllString(string(fresh), "") != protocVersionLine.ReplaceAllString(string(committed), "") {
			t.Errorf("%s is stale: run `make proto` and commit the result", rel)
		}
	}
}
