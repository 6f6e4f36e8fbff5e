package bench

import _ "embed"

//go:embed namespaces.yaml
var widgetsNamespace string

// Namespaces returns a namespaces file of the load tools: the widgets
// namespace of namespaces.yaml with the keys of widgets added to it (lines
// indented as its own keys, by four spaces), then the namespaces of more
// (list items, indented by two spaces).
func Namespaces(widgets, more string) []byte {
	return []byte(widgetsNamespace + widgets + more)
}
