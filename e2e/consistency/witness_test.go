package consistency_test

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// witness is a read of one key that no linearization can explain, with
// the operations that show it.
type witness struct {
	kind  string // "stale", "hidden" or "flip"
	cache string // the read's X-Cache; for a flip, both reads'
	text  string
}

// witnesses finds the reads of one key's history that contradict what
// happened before (or after) them:
//   - stale: the read returned the value of a write P, but a write that
//     began after P's answer was acknowledged before the read began;
//   - hidden: the read answered 404, but a PUT was acknowledged before it
//     began and no DELETE (acknowledged or of unknown outcome) overlaps
//     the time from that PUT's call to the read's answer; or a DELETE that
//     began after the read's answer found a value (204), and no PUT
//     overlaps the time from the read's call to that DELETE's answer;
//   - flip: two reads, one ended before the other began, that no order of
//     the writes explains: the later one returned the value of a write
//     that ended before the earlier one began, or answered 404 with no
//     DELETE overlapping them both. Either read may be the wrong one.
//
// Values are unique, so each proves the history is not linearizable; a
// history without a witness may still not be (several operations can
// contradict each other without any two doing so), which only the checker
// finds.
func witnesses(ops []porcupine.Operation) []witness {
	puts := map[string]porcupine.Operation{}
	// acked are the acknowledged writes that changed the key; found the
	// DELETEs that found a value; deletes and writes those and the ones of
	// unknown outcome.
	var acked, found, deletes, writes, reads []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(kvInput), op.Output.(kvOutput)
		switch {
		case in.Kind == opGet:
			reads = append(reads, op)
		case in.Kind == opDelete && (out.Unknown || out.Status == 204):
			deletes = append(deletes, op)
			if !out.Unknown {
				acked, found = append(acked, op), append(found, op)
			}
		case in.Kind == opPut || in.Kind == opCPut:
			puts[in.Value] = op
			if out.Unknown || out.Status == 200 {
				writes = append(writes, op)
			}
			if !out.Unknown && out.Status == 200 {
				acked = append(acked, op)
			}
		}
	}
	// shows returns what op shows the state to be: present with a value,
	// or absent.
	shows := func(op porcupine.Operation) (string, bool) {
		in, out := op.Input.(kvInput), op.Output.(kvOutput)
		switch in.Kind {
		case opGet:
			return out.Value, out.Status == 200
		case opDelete:
			return "", false
		}
		return in.Value, true
	}
	ms := func(ns int64) string { return fmt.Sprintf("%.1fms", float64(ns)/1e6) }
	desc := func(op porcupine.Operation) string {
		return fmt.Sprintf("%s [%s, %s]", registerModel.DescribeOperation(op.Input, op.Output), ms(op.Call), ms(op.Return))
	}
	noDelete := func(from, to int64) bool {
		return !slices.ContainsFunc(deletes, func(d porcupine.Operation) bool { return d.Return > from && d.Call < to })
	}
	var out []witness
	add := func(kind, cache, format string, args ...any) {
		out = append(out, witness{kind, cache, fmt.Sprintf(format, args...)})
	}
	for _, r := range reads {
		ro := r.Output.(kvOutput)
		if ro.Status == 200 {
			p, ok := puts[ro.Value]
			if !ok {
				add("stale", ro.Cache, "%s: no write wrote that value", desc(r))
				continue
			}
			after := func(e porcupine.Operation) bool {
				v, _ := shows(e)
				return v != ro.Value && e.Call > p.Return && e.Return < r.Call
			}
			if i := slices.IndexFunc(acked, after); i >= 0 {
				add("stale", ro.Cache, "%s, written by %s, but %s came between them", desc(r), desc(p), desc(acked[i]))
			} else if i := slices.IndexFunc(reads, after); i >= 0 {
				add("flip", reads[i].Output.(kvOutput).Cache+"→"+ro.Cache, "%s came after %s, which came after %s",
					desc(r), desc(reads[i]), desc(p))
			}
			continue
		}
		present := func(e porcupine.Operation) bool {
			_, present := shows(e)
			return present && e.Return < r.Call && noDelete(e.Call, r.Return)
		}
		if i := slices.IndexFunc(acked, present); i >= 0 {
			add("hidden", ro.Cache, "%s, after %s, and no delete overlaps them", desc(r), desc(acked[i]))
		} else if i := slices.IndexFunc(found, func(d porcupine.Operation) bool {
			return d.Call > r.Return && !slices.ContainsFunc(writes, func(w porcupine.Operation) bool { return w.Return > r.Call && w.Call < d.Return })
		}); i >= 0 {
			add("hidden", ro.Cache, "%s, but the later %s found a value, and no put overlaps them", desc(r), desc(found[i]))
		} else if i := slices.IndexFunc(reads, present); i >= 0 {
			add("flip", reads[i].Output.(kvOutput).Cache+"→"+ro.Cache, "%s came after %s, and no delete overlaps them",
				desc(r), desc(reads[i]))
		}
	}
	return out
}

// summarize counts witnesses by kind and X-Cache, such as
// "hidden (hit): 3, stale (hit-l1): 1, flip (hit→miss): 2".
func summarize(ws []witness) string {
	counts := map[string]int{}
	for _, w := range ws {
		counts[fmt.Sprintf("%s (%s)", w.kind, w.cache)]++
	}
	var parts []string
	for _, k := range slices.SortedFunc(maps.Keys(counts), cmp.Compare) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	if len(parts) == 0 {
		return "no read contradicts an acknowledged write on its own; several operations do together (see the history)"
	}
	return strings.Join(parts, ", ")
}
