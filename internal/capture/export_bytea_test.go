package capture

// DecodeBytea exports decodeBytea to the tests.
var DecodeBytea = decodeBytea
