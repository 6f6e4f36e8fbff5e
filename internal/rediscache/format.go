package rediscache

import (
	"errors"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// The value format. Each key holds one Redis string: a fixed 35-byte header
// and then the payload.
//
//	offset  size  field
//	0       1     format: how the payload is encoded (below)
//	1       1     kind: 'P' for a present entry, 'A' for an absent one,
//	              'E' for a present entry whose row expires (a writer's TTL)
//	2       20    version: zero-padded decimal, 0 to 9223372036854775807
//	22      13    fresh until: Unix milliseconds, zero-padded decimal; after
//	              it the entry is stale (Redis keeps a present entry for the
//	              namespace's MaxStale longer, to serve while it revalidates)
//	35      13    expires at, only with kind 'E': Unix milliseconds,
//	              zero-padded decimal; from then on the entry reads as absent
//	35 or 48 ...  payload; empty for an absent entry
//
// The formats:
//
//	'1'  the payload is the value's bytes, raw
//	'2'  the payload is one zstd frame of the value's bytes
//	'3'  the payload is a 4-byte big-endian dictionary id, then one zstd
//	     frame of the value's bytes compressed with that dictionary of the
//	     namespace (see codec.go)
//
// The header layout is the same in every format, so the fill script can
// compare versions without knowing how a payload is encoded; only the format
// byte says how to read the payload. A later format takes a new format byte,
// and a reader that does not know it treats the value as a miss. Absent
// entries have no payload and are always written in format '1'. Versions are
// fixed-width digits, so the script compares them as strings. A reader
// that does not know kind 'E' treats the value as a miss.
const (
	formatRaw      = '1'
	formatZstd     = '2'
	formatZstdDict = '3'
	kindPresent    = 'P'
	kindAbsent     = 'A'
	kindExpiring   = 'E'

	versionOffset = 2
	versionDigits = 20
	freshOffset   = versionOffset + versionDigits
	freshDigits   = 13
	headerLen     = freshOffset + freshDigits
	expiryDigits  = 13
)

// expiryMillis returns when e expires in Unix milliseconds, or zero when
// it is absent or never expires.
func expiryMillis(e warmcache.Entry) uint64 {
	if !e.Found || e.ExpiresAt.IsZero() {
		return 0
	}
	return uint64(max(e.ExpiresAt.UnixMilli(), 1))
}

// headerSize returns the length of e's header: headerLen, and the expiry
// for an entry that expires.
func headerSize(e warmcache.Entry) int {
	if expiryMillis(e) > 0 {
		return headerLen + expiryDigits
	}
	return headerLen
}

// errNegativeVersion is returned for an entry whose version the format
// cannot hold.
var errNegativeVersion = errors.New("negative version")

// encode returns the stored form of e in format '1'. The payload is e.Value
// as it is; an absent entry has none.
func encode(e warmcache.Entry) ([]byte, error) {
	n := headerSize(e)
	if e.Found {
		n += len(e.Value)
	}
	b := make([]byte, headerSize(e), n)
	if err := putHeader(b, formatRaw, e); err != nil {
		return nil, err
	}
	if e.Found {
		b = append(b, e.Value...)
	}
	return b, nil
}

// putHeader writes the header of e in format into b[:headerSize(e)].
func putHeader(b []byte, format byte, e warmcache.Entry) error {
	if e.Version < 0 {
		return errNegativeVersion
	}
	b[0] = format
	b[1] = kindAbsent
	if e.Found {
		b[1] = kindPresent
	}
	putDigits(b[versionOffset:freshOffset], uint64(e.Version))
	var fresh uint64
	if ms := e.FreshUntil.UnixMilli(); !e.FreshUntil.IsZero() && ms > 0 {
		fresh = uint64(ms)
	}
	putDigits(b[freshOffset:headerLen], fresh)
	if exp := expiryMillis(e); exp > 0 {
		b[1] = kindExpiring
		putDigits(b[headerLen:headerLen+expiryDigits], exp)
	}
	return nil
}

// decode reads a stored value's header. ok is false when b is not in a
// format this package knows. The entry's Value is the payload as stored, in
// the returned format, and shares b's memory.
func decode(b []byte) (e warmcache.Entry, format byte, ok bool) {
	if len(b) < headerLen {
		return warmcache.Entry{}, 0, false
	}
	switch format = b[0]; format {
	case formatRaw, formatZstd, formatZstdDict:
	default:
		return warmcache.Entry{}, 0, false
	}
	v, ok := digits(b[versionOffset:freshOffset])
	if !ok {
		return warmcache.Entry{}, 0, false
	}
	fresh, ok := digits(b[freshOffset:headerLen])
	if !ok {
		return warmcache.Entry{}, 0, false
	}
	e.Version = v
	if fresh > 0 {
		e.FreshUntil = time.UnixMilli(fresh)
	}
	switch b[1] {
	case kindPresent:
		e.Found = true
		e.Value = b[headerLen:]
	case kindExpiring:
		if len(b) < headerLen+expiryDigits {
			return warmcache.Entry{}, 0, false
		}
		exp, ok := digits(b[headerLen : headerLen+expiryDigits])
		if !ok || exp == 0 {
			return warmcache.Entry{}, 0, false
		}
		e.Found = true
		e.ExpiresAt = time.UnixMilli(exp)
		e.Value = b[headerLen+expiryDigits:]
	case kindAbsent:
	default:
		return warmcache.Entry{}, 0, false
	}
	return e, format, true
}

// putDigits writes v as zero-padded decimal filling b.
func putDigits(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = '0' + byte(v%10)
		v /= 10
	}
}

// digits reads zero-padded decimal; ok is false for a non-digit or a number
// past the int64 range.
func digits(b []byte) (int64, bool) {
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		// 20 digits can exceed the uint64 range; any value past
		// the int64 range is not a version, overflowed or not.
		if v > 1<<63-1 {
			return 0, false
		}
	}
	return int64(v), true
}

// fillScript stores ARGV[1], an encoded entry, under KEYS[1] with a TTL of
// ARGV[2] milliseconds, unless the key holds an entry that should win. It
// returns 1 when it stored the entry and 0 when it kept the cached one.
//
// The cached entry wins when its version is newer, and when the versions are
// equal (and not zero) and the cached entry is absent while the new one is
// present, of kind 'P' or 'E' (an absent entry at version v records that
// the key was gone after v). An equal
// version otherwise replaces the cached entry, which renews its freshness: a
// revalidation that reads the same row again extends it. An absent entry with
// version 0 (a read that found nothing) therefore never replaces a cached
// row. A value that does not start with a header (a foreign or damaged
// value) is replaced. Both versions are 20 ASCII digits, which compare as
// strings in the order of their numbers. With ARGV[3] '1' (a fill that only
// replaces), nothing is stored when the key holds nothing, and an absent
// entry at version 0 (a read that found nothing, which no version orders
// against the fill) is removed rather than replaced: a change replayed from
// long ago must not pass for the latest, and the next read goes to the
// warehouse.
const fillScript = `
local new = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if not cur and ARGV[3] == '1' then
  return 0
end
if cur and string.len(cur) >= 22 then
  local cv = string.sub(cur, 3, 22)
  if string.find(cv, '^%d+$') then
    local nv = string.sub(new, 3, 22)
    if ARGV[3] == '1' and cv == '00000000000000000000' and string.sub(cur, 2, 2) == 'A' and nv ~= cv then
      redis.call('DEL', KEYS[1])
      return 0
    end
    if cv > nv or (cv == nv and cv ~= '00000000000000000000' and string.sub(cur, 2, 2) == 'A' and string.sub(new, 2, 2) ~= 'A') then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[2])
return 1
`
