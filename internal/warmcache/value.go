package warmcache

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// checkValue validates a value to be stored in ns: valid JSON, at most
// maxBytes long and maxDepth deep, and for a columns namespace an object
// whose fields are all columns of the namespace.
func checkValue(ns *Namespace, value []byte, maxBytes, maxDepth int) error {
	if len(value) > maxBytes {
		return fmt.Errorf("%w: value is larger than %d bytes", ErrTooLarge, maxBytes)
	}
	if len(bytes.TrimSpace(value)) == 0 {
		return fmt.Errorf("%w: value is empty", ErrInvalidValue)
	}
	if !json.Valid(value) {
		return fmt.Errorf("%w: value is not valid JSON", ErrInvalidValue)
	}
	if d := jsonDepth(value); d > maxDepth {
		return fmt.Errorf("%w: value is nested deeper than %d levels", ErrInvalidValue, maxDepth)
	}
	if ns.Layout != LayoutColumns {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return fmt.Errorf("%w: value must be a JSON object with the namespace's columns", ErrInvalidValue)
	}
	for name := range fields {
		if !ns.hasColumn(name) {
			return fmt.Errorf("%w: field %q is not a column of namespace %q", ErrInvalidValue, truncate(name), ns.Name)
		}
	}
	return nil
}

func (ns *Namespace) hasColumn(name string) bool {
	for _, c := range ns.Columns {
		if c.Name == name {
			return true
		}
	}
	return false
}

// jsonDepth returns the deepest nesting of objects and arrays in valid JSON.
func jsonDepth(b []byte) int {
	depth, max := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}
