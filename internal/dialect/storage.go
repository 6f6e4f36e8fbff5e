package dialect

import (
	"fmt"
	"slices"
)

// Limits of the storage options and of names.
const (
	// DefaultPartitions is the number of hash partitions of a PostgreSQL
	// table when the namespace names none.
	DefaultPartitions = 8
	// MaxPartitions is the most hash partitions a namespace may ask for.
	MaxPartitions = 1024
	// MaxIdentifierLen is the longest identifier, in bytes, that both
	// dialects keep whole (NAMEDATALEN - 1).
	MaxIdentifierLen = 63
)

// The compressions a namespace may ask for. CompressLZ4 and CompressPGLZ
// are PostgreSQL's TOAST methods; CompressZstd, CompressZlib and
// CompressRLE are Greenplum's block compressions of append-optimized
// tables.
const (
	CompressNone = "none"
	CompressLZ4  = "lz4"
	CompressPGLZ = "pglz"
	CompressZstd = "zstd"
	CompressZlib = "zlib"
	CompressRLE  = "rle_type"
)

// Compressions returns every compression a namespace may name, in the
// order messages list them. Each call returns a new slice.
func Compressions() []string {
	return []string{CompressNone, CompressLZ4, CompressPGLZ, CompressZstd, CompressZlib, CompressRLE}
}

// ValidCompression reports whether c names a compression of either
// dialect. The empty string is not one: callers treat it as CompressNone.
func ValidCompression(c string) bool { return slices.Contains(Compressions(), c) }

// TOAST reports whether c is one of PostgreSQL's TOAST compressions.
func TOAST(c string) bool { return c == CompressLZ4 || c == CompressPGLZ }

// Block reports whether c is one of Greenplum's block compressions of
// append-optimized tables.
func Block(c string) bool { return c == CompressZstd || c == CompressZlib || c == CompressRLE }

// CompressLevel returns the Greenplum compresslevel of block compression c:
// level, or c's default when level is zero. It fails when level is out of
// c's range or c is not a block compression.
func CompressLevel(c string, level int) (int, error) {
	var def, lo, hi int
	switch c {
	case CompressZstd:
		def, lo, hi = 3, 1, 19
	case CompressZlib:
		def, lo, hi = 5, 1, 9
	case CompressRLE:
		def, lo, hi = 1, 1, 4
	default:
		return 0, fmt.Errorf("storage.compression: %s has no compress level", c)
	}
	if level == 0 {
		return def, nil
	}
	if level < lo || level > hi {
		return 0, fmt.Errorf("storage.compress_level: must be between %d and %d for %s, got %d", lo, hi, c, level)
	}
	return level, nil
}
