package warmcache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// checkValue validates a value to be stored in ns: at most maxBytes long;
// unless ns stores opaque bytes (LayoutBytes, where any bytes, none
// included, are a value), valid JSON at most maxDepth deep, and for a
// columns namespace an object whose fields are all columns of the
// namespace.
func checkValue(ns *Namespace, value []byte, maxBytes, maxDepth int) error {
	if len(value) > maxBytes {
		return fmt.Errorf("%w: value is larger than %d bytes", ErrTooLarge, maxBytes)
	}
	if ns.Opaque() {
		return nil
	}
	if len(bytes.TrimSpace(value)) == 0 {
		return fmt.Errorf("%w: value is empty", ErrInvalidValue)
	}
	if !json.Valid(value) {
		return fmt.Errorf("%w: value is not valid JSON", ErrInvalidValue)
	}
	if err := checkJSONText(value, "value"); err != nil {
		return err
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

// The bounds of a JSON number that the warehouse stores as numeric.
const (
	maxNumberDigits   = 1000
	maxNumberExponent = 1000
)

// checkJSONText refuses valid JSON that the warehouse cannot store: text
// that is not valid UTF-8, the escape \u0000 (jsonb has no NUL), and a
// number with more than maxNumberDigits digits or an exponent beyond
// ±maxNumberExponent (numeric would overflow). what names the document in
// the error, which wraps ErrInvalidValue.
func checkJSONText(b []byte, what string) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidValue, what)
	}
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
				if c == 'u' && bytes.HasPrefix(b[i+1:], []byte("0000")) {
					return fmt.Errorf("%w: %s contains \\u0000, which the warehouse cannot store", ErrInvalidValue, what)
				}
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(b) && bytes.IndexByte([]byte("+-.eE0123456789"), b[j]) >= 0 {
				j++
			}
			if err := checkNumber(b[i:j], what); err != nil {
				return err
			}
			i = j - 1
		}
	}
	return nil
}

// checkNumber bounds the digits and the exponent of a JSON number.
func checkNumber(n []byte, what string) error {
	mantissa, exp, hasExp := bytes.Cut(bytes.ToLower(n), []byte("e"))
	digits := 0
	for _, c := range mantissa {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	if digits > maxNumberDigits {
		return fmt.Errorf("%w: %s has a number of more than %d digits", ErrInvalidValue, what, maxNumberDigits)
	}
	if hasExp {
		e, err := strconv.Atoi(string(exp))
		if err != nil || e > maxNumberExponent || e < -maxNumberExponent {
			return fmt.Errorf("%w: %s has a number whose exponent is beyond ±%d", ErrInvalidValue, what, maxNumberExponent)
		}
	}
	return nil
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
