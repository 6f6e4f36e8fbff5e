package warmcache

// CheckValue exposes checkValue to the external tests.
var CheckValue = checkValue
