package schema

import "github.com/warmcache/warmcache/internal/warmcache"

// Table is a namespace's table as migrate sees it: the namespace's
// mapping, whether migrate creates and drops the table, and the storage
// options it creates it with. The serving path needs none of this but the
// namespace.
type Table struct {
	// Namespace is the namespace whose table this is.
	Namespace *warmcache.Namespace
	// Managed means migrate creates and drops the table; otherwise the
	// table already exists and warmcache only reads and writes rows.
	Managed bool
	// Storage is what migrate creates a managed table with.
	Storage Storage
}

// Storage holds the options migrate uses when it creates a namespace's
// table. Each dialect applies the options it has and says in the DDL what
// it did with the others. The zero value is a heap table without
// compression. Its YAML is a namespace's storage: in a namespaces file.
type Storage struct {
	// Partitions is the number of hash partitions on PostgreSQL. Zero means 8.
	// Greenplum distributes by the key instead.
	Partitions int `yaml:"partitions"`
	// Compression is "none", "lz4", "pglz", "zstd", "zlib" or "rle_type".
	// Empty means none.
	Compression string `yaml:"compression"`
	// CompressLevel is the Greenplum compresslevel. Zero means the
	// algorithm's default (zstd 3, zlib 5).
	CompressLevel int `yaml:"compress_level"`
	// AppendOptimized makes the table append-optimized on Greenplum.
	AppendOptimized bool `yaml:"appendoptimized"`
	// Orientation is "row" or "column" for append-optimized tables on
	// Greenplum. Empty means row.
	Orientation string `yaml:"orientation"`
	// GINIndex adds a GIN (jsonb_path_ops) index on a packed JSONB value for
	// containment queries.
	GINIndex bool `yaml:"gin_index"`
}
