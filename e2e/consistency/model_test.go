package consistency_test

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// opKind is what a client asks of one key.
type opKind uint8

const (
	opGet    opKind = iota // GET
	opPut                  // PUT
	opCPut                 // PUT with If-Match
	opDelete               // DELETE
)

// kvInput is one request of a history.
type kvInput struct {
	Key   int
	Kind  opKind
	Value string // PUT: the write id, unique in the history
	Match int64  // conditional PUT: the If-Match version
}

// kvOutput is its answer.
type kvOutput struct {
	// Unknown marks a write answered with a 5xx or not at all: it may or
	// may not have taken effect, at any time after its call.
	Unknown bool
	Status  int
	Value   string // GET 200: the write id read
	Version int64  // GET 200 and PUT 200: the ETag
	Cache   string // GET: X-Cache
}

// kvState is the model's state of one key: a register that can be absent.
// Version zero on a present register means a version that no answer has
// shown yet (the write that stored it had an unknown outcome).
type kvState struct {
	Present bool
	Value   string
	Version int64
}

// registerModel is the sequential specification the service must be
// linearizable to, per key:
//   - GET answers 404 when the key is absent, else 200 with the value and
//     the version (ETag) of the write that stored it;
//   - PUT stores a value at a new version, above the version it replaces;
//   - PUT with If-Match stores it only when the key is present at that
//     version;
//   - DELETE of a present key makes it absent and answers 204;
//   - a write of unknown outcome either took effect or did not.
//
// A PUT answered 412 and a DELETE answered 404 wrote nothing and constrain
// nothing: they tell what the warehouse held, and a write commits there
// before it updates the caches, so another client may see its effect in
// such an answer, and then the previous value in a read, until the write is
// acknowledged. The README promises read-your-writes, not more, for that
// moment; reads and successful writes must still be linearizable.
var registerModel = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []any { return []any{kvState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
		switch in.Kind {
		case opGet:
			if out.Status != 200 {
				return when(!s.Present, s)
			}
			if !s.Present || s.Value != out.Value || s.Version != 0 && s.Version != out.Version {
				return nil
			}
			s.Version = out.Version
			return []any{s}
		case opPut:
			stored := kvState{Present: true, Value: in.Value, Version: out.Version}
			if out.Unknown {
				return []any{s, stored}
			}
			return when(!s.Present || s.Version == 0 || out.Version > s.Version, stored)
		case opCPut:
			stored := kvState{Present: true, Value: in.Value, Version: out.Version}
			match := s.Present && (s.Version == in.Match || s.Version == 0)
			switch {
			case out.Unknown && match:
				return []any{s, stored}
			case out.Unknown, out.Status == 412:
				return []any{s}
			}
			return when(match && out.Version > in.Match, stored)
		case opDelete:
			switch {
			case out.Unknown:
				return []any{s, kvState{}}
			case out.Status == 404:
				return []any{s}
			}
			return when(s.Present, kvState{})
		}
		return nil
	},
	Hash: func(state any) uint64 {
		s := state.(kvState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t|%s|%d", s.Present, s.Value, s.Version)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		var op string
		switch in.Kind {
		case opGet:
			op = "get"
		case opPut:
			op = "put " + in.Value
		case opCPut:
			op = fmt.Sprintf("put %s if @%d", in.Value, in.Match)
		case opDelete:
			op = "delete"
		}
		switch {
		case out.Unknown:
			return op + " → ? (unknown outcome)"
		case in.Kind == opGet && out.Status == 200:
			return fmt.Sprintf("%s → %s@%d (%s)", op, out.Value, out.Version, out.Cache)
		case in.Kind == opGet:
			return fmt.Sprintf("%s → absent (%s)", op, out.Cache)
		case out.Status == 200:
			return fmt.Sprintf("%s → @%d", op, out.Version)
		}
		return fmt.Sprintf("%s → %d", op, out.Status)
	},
	DescribeState: func(state any) string {
		s := state.(kvState)
		switch {
		case !s.Present:
			return "absent"
		case s.Version == 0:
			return s.Value + "@?"
		}
		return fmt.Sprintf("%s@%d", s.Value, s.Version)
	},
}

// when returns s as the one next state if ok, else no state.
func when(ok bool, s kvState) []any {
	if !ok {
		return nil
	}
	return []any{s}
}

// partitionByKey splits a history into one history per key, in key order:
// keys are independent registers.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[int][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(kvInput).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]int, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

// recorder collects a history from concurrent clients, with timestamps in
// nanoseconds of the monotonic clock since the recorder began.
type recorder struct {
	base  time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	notes []porcupine.Annotation
}

func newRecorder() *recorder { return &recorder{base: time.Now()} }

func (r *recorder) now() int64 { return time.Since(r.base).Nanoseconds() }

// add records one operation. An output of unknown outcome gets its return
// time when the history ends (see history).
func (r *recorder) add(client int, in kvInput, out kvOutput, call, ret int64) {
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	r.mu.Unlock()
}

// note marks an event of the run, such as a fault, in the visualization.
func (r *recorder) note(what string) {
	r.mu.Lock()
	r.notes = append(r.notes, porcupine.Annotation{Tag: "faults", Start: r.now(), Description: what})
	r.mu.Unlock()
}

// history returns the operations, those of unknown outcome extended to the
// end of the history: they may take effect at any point after their call.
func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := int64(0)
	for _, op := range r.ops {
		end = max(end, op.Return)
	}
	out := slices.Clone(r.ops)
	for i := range out {
		if out[i].Output.(kvOutput).Unknown {
			out[i].Return = end + 1
		}
	}
	return out
}

// checkTimeout bounds the linearizability check of one key's history; a
// check that runs out of time proves nothing either way.
const checkTimeout = 30 * time.Second

// verdict is the outcome of a linearizability check.
type verdict struct {
	keys, illegal, unknown int
	witnesses              []witness // of the keys not linearizable
}

// keyResult is the check of one key's history.
type keyResult struct {
	key  int
	ops  []porcupine.Operation
	res  porcupine.CheckResult
	info porcupine.LinearizationInfo
	took time.Duration
}

// checkKeys checks the history key by key, concurrently.
func checkKeys(model porcupine.Model, history []porcupine.Operation) []keyResult {
	parts := partitionByKey(history)
	results := make([]keyResult, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() {
			start := time.Now()
			res, info := porcupine.CheckOperationsVerbose(model, part, checkTimeout)
			results[i] = keyResult{key: part[0].Input.(kvInput).Key, ops: part, res: res, info: info, took: time.Since(start)}
		})
	}
	wg.Wait()
	return results
}

// checkLinearizable checks the history key by key. For each key whose
// history is not linearizable it writes porcupine's visualization and the
// history as text, names the key and the files, and fails the test.
func checkLinearizable(t *testing.T, label string, rec *recorder) verdict {
	t.Helper()
	return checkHistory(t, label, rec, t.Errorf)
}

// checkHistory is checkLinearizable with the failure of each key that is
// not linearizable given to fail (t.Errorf to fail the test, t.Logf to
// report it only).
func checkHistory(t *testing.T, label string, rec *recorder, fail func(format string, args ...any)) verdict {
	t.Helper()
	model := registerModel.ToModel()
	results := checkKeys(model, rec.history())
	v := verdict{keys: len(results)}
	for _, r := range results {
		// A linearizable history has no witness: the search, quadratic in
		// the history, is left out for it (a soak's history is long).
		var ws []witness
		if r.res != porcupine.Ok {
			ws = witnesses(r.ops)
		}
		if r.res == porcupine.Unknown && len(ws) > 0 {
			// A witness proves what the check ran out of time to.
			t.Logf("%s: key %d: the check of %d operations ran out of its %v, but %d reads are witnesses",
				label, r.key, len(r.ops), checkTimeout, len(ws))
			r.res = porcupine.Illegal
		}
		switch r.res {
		case porcupine.Illegal:
			v.illegal++
			r.info.AddAnnotations(rec.notes)
			f, err := os.CreateTemp(artifactDir(t), fmt.Sprintf("%s-key%d-*.html", safeName(t.Name()), r.key))
			if err != nil {
				t.Fatal(err)
			}
			path := f.Name()
			_ = f.Close()
			if err := porcupine.VisualizePath(model, r.info, path); err != nil {
				t.Errorf("%s: key %d: write the visualization: %v", label, r.key, err)
			}
			v.witnesses = append(v.witnesses, ws...)
			var b strings.Builder
			for i, w := range ws {
				if i == 50 {
					fmt.Fprintf(&b, "... and %d more\n", len(ws)-i)
					break
				}
				fmt.Fprintf(&b, "%s: %s\n", w.kind, w.text)
			}
			b.WriteString("\n")
			b.WriteString(describeHistory(model, r.ops, r.info))
			text := strings.TrimSuffix(path, ".html") + ".txt"
			if err := os.WriteFile(text, []byte(b.String()), 0o644); err != nil {
				t.Errorf("%s: key %d: write the history: %v", label, r.key, err)
			}
			example := ""
			if len(ws) > 0 {
				example = "; first: " + ws[0].kind + ": " + ws[0].text
			}
			fail("%s: key %d: the history of %d operations is not linearizable (checked in %v): %s%s\n\tvisualization: %s\n\tas text: %s",
				label, r.key, len(r.ops), r.took.Round(time.Millisecond), summarize(ws), example, path, text)
		case porcupine.Unknown:
			v.unknown++
			t.Logf("%s: key %d: the check of %d operations ran out of its %v; no verdict", label, r.key, len(r.ops), checkTimeout)
		}
	}
	return v
}

// describeHistory lists a key's operations in the order of their calls,
// with their times in milliseconds, then the longest linearizable prefix
// the checker found, whose next operation is where no order of the
// operations fits the model.
func describeHistory(model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(x, y porcupine.Operation) int { return cmp.Compare(x.Call, y.Call) })
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	for _, op := range sorted {
		fmt.Fprintf(&b, "%10.3f %10.3f  client %2d  %s\n", ms(op.Call), ms(op.Return), op.ClientId, model.DescribeOperation(op.Input, op.Output))
	}
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	fmt.Fprintf(&b, "\nlongest linearizable prefix: %d of %d operations; its last 20:\n", len(longest), len(ops))
	for _, op := range longest[max(0, len(longest)-20):] {
		fmt.Fprintf(&b, "%10.3f %10.3f  client %2d  %s\n", ms(op.Call), ms(op.Return), op.ClientId, model.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// artifacts is the directory of failing histories, made once per run.
var artifacts struct {
	once sync.Once
	dir  string
	err  error
}

// artifactDir returns where failing histories are written:
// $WARMCACHE_TEST_ARTIFACTS when set, else a directory under the system's
// temporary directory that outlives the test, so that its files can be
// opened after the run.
func artifactDir(t *testing.T) string {
	t.Helper()
	artifacts.once.Do(func() {
		if dir := os.Getenv("WARMCACHE_TEST_ARTIFACTS"); dir != "" {
			artifacts.dir, artifacts.err = dir, os.MkdirAll(dir, 0o755)
			return
		}
		artifacts.dir, artifacts.err = os.MkdirTemp("", "warmcache-consistency-")
	})
	if artifacts.err != nil {
		t.Fatalf("artifacts: %v", artifacts.err)
	}
	return artifacts.dir
}

// safeName turns a test name into a file name.
func safeName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
