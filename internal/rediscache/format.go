package rediscache

import (
	"errors"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The value format. Each key holds one Redis string: a fixed 22-byte header
// and then the payload.
//
//	offset  size  field
//	0       1     format: '1' means the payload is the JSON bytes, raw
//	1       1     kind: 'P' for a present entry, 'A' for an absent one
//	2       20    version: zero-padded decimal, 0 to 9223372036854775807
//	22      ...   payload; empty for an absent entry
//
// The header layout is the same in every format, so the fill script can
// compare versions without knowing how a payload is encoded; only the format
// byte says how to read the payload. A later format (compressed payloads, for
// instance) takes a new format byte, and a reader that does not know it treats
// the value as a miss. Versions are fixed-width digits, so the script compares
// them as strings.
const (
	formatRaw   = '1'
	kindPresent = 'P'
	kindAbsent  = 'A'

	versionOffset = 2
	versionDigits = 20
	headerLen     = versionOffset + versionDigits
)

// errNegativeVersion is returned for an entry whose version the format
// cannot hold.
var errNegativeVersion = errors.New("negative version")

// encode returns the stored form of e. The payload is e.Value as it is; an
// absent entry has none.
func encode(e warmcache.Entry) ([]byte, error) {
	if e.Version < 0 {
		return nil, errNegativeVersion
	}
	n := headerLen
	if e.Found {
		n += len(e.Value)
	}
	b := make([]byte, headerLen, n)
	b[0] = formatRaw
	b[1] = kindAbsent
	if e.Found {
		b[1] = kindPresent
	}
	v := uint64(e.Version)
	for i := headerLen - 1; i >= versionOffset; i-- {
		b[i] = '0' + byte(v%10)
		v /= 10
	}
	if e.Found {
		b = append(b, e.Value...)
	}
	return b, nil
}

// decode reads a stored value. ok is false when b is not in a format this
// package knows. The entry's Value shares b's memory.
func decode(b []byte) (e warmcache.Entry, ok bool) {
	if len(b) < headerLen || b[0] != formatRaw {
		return warmcache.Entry{}, false
	}
	var v uint64
	for _, c := range b[versionOffset:headerLen] {
		if c < '0' || c > '9' {
			return warmcache.Entry{}, false
		}
		v = v*10 + uint64(c-'0')
		// 20 digits can exceed the uint64 range; any value past
		// the int64 range is not a version, overflowed or not.
		if v > 1<<63-1 {
			return warmcache.Entry{}, false
		}
	}
	e.Version = int64(v)
	switch b[1] {
	case kindPresent:
		e.Found = true
		e.Value = b[headerLen:]
	case kindAbsent:
	default:
		return warmcache.Entry{}, false
	}
	return e, true
}

// fillScript stores ARGV[1], an encoded entry, under KEYS[1] with a TTL of
// ARGV[2] milliseconds, unless the key holds an entry that should win. It
// returns 1 when it stored the entry and 0 when it kept the cached one.
//
// The cached entry is kept when its version is newer than or equal to the new
// one's, with one exception: a present entry replaces the absent entry of a
// read (version 0). So an absent entry with version 0 is only ever stored on a
// key that holds nothing. A value that does not start with a header (a foreign
// or damaged value) is replaced. Both versions are 20 ASCII digits, which
// compare as strings in the order of their numbers.
const fillScript = `
local new = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur and string.len(cur) >= 22 then
  local cv = string.sub(cur, 3, 22)
  if string.find(cv, '^%d+$') then
    local nv = string.sub(new, 3, 22)
    local readAbsent = string.sub(cur, 2, 2) == 'A' and cv == '00000000000000000000'
    if not (readAbsent and string.sub(new, 2, 2) == 'P') and cv >= nv then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[2])
return 1
`
