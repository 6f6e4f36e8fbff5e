package httpapi

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestErrorTableDocumented checks the error table against openapi.json: each
// code it answers is in the ErrorCode enum and listed (x-error-codes) by a
// response of the document with the table's status, each code of the enum
// is one the service answers, and a status with Retry-After, Allow or
// WWW-Authenticate in the table declares that header in every response
// that lists the code.
func TestErrorTableDocumented(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas   map[string]struct{ Enum []string } `json:"schemas"`
			Responses map[string]docResponse             `json:"responses"`
		} `json:"components"`
	}
	data, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// The responses by status: those of the operations, and those of the
	// requests that match no operation.
	byStatus := map[int][]docResponse{
		http.StatusNotFound:         {doc.Components.Responses["NoRoute"]},
		http.StatusMethodNotAllowed: {doc.Components.Responses["MethodNotAllowed"]},
	}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Responses map[string]docResponse `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			for s, r := range op.Responses {
				if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
					r = doc.Components.Responses[name]
				}
				status, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("%s %s: status %q", method, path, s)
				}
				byStatus[status] = append(byStatus[status], r)
			}
		}
	}
	enum := doc.Components.Schemas["ErrorCode"].Enum
	answered := []string{"internal"} // every unknown error
	type row struct {
		status int
		code   string
		header string
	}
	rows := []row{{status: http.StatusInternalServerError, code: "internal"}}
	for _, e := range errorStatus {
		r := row{status: e.status, code: e.code}
		switch {
		case e.retryAfter > 0 || e.status == http.StatusTooManyRequests:
			r.header = "Retry-After"
		case e.allow != allowNone:
			r.header = "Allow"
		case e.status == http.StatusUnauthorized:
			r.header = "WWW-Authenticate"
		}
		rows = append(rows, r)
		answered = append(answered, e.code)
	}
	for _, r := range rows {
		if !slices.Contains(enum, r.code) {
			t.Errorf("code %q is not in the ErrorCode enum", r.code)
		}
		listed, undeclared := false, false
		for _, resp := range byStatus[r.status] {
			if !slices.Contains(resp.Codes, r.code) {
				continue
			}
			listed = true
			if _, ok := resp.Headers[r.header]; r.header != "" && !ok {
				undeclared = true
			}
		}
		if !listed {
			t.Errorf("no %d response of openapi.json lists the code %q", r.status, r.code)
		}
		if undeclared {
			t.Errorf("a %d response that lists %q does not declare %s", r.status, r.code, r.header)
		}
	}
	for _, code := range enum {
		if !slices.Contains(answered, code) {
			t.Errorf("the ErrorCode enum has %q, which the service never answers", code)
		}
	}
}

// docResponse is what TestErrorTableDocumented reads of a response.
type docResponse struct {
	Ref     string                     `json:"$ref"`
	Codes   []string                   `json:"x-error-codes"`
	Headers map[string]json.RawMessage `json:"headers"`
}
