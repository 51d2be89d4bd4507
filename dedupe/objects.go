package dedupe

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// decodeValue reads one JSON value from dec (which uses numbers as
// json.Number) into the tree Canonical encodes: map[string]any, []any,
// json.Number, string, bool or nil. Unlike dec.Decode into an any, it
// refuses an object that names a key twice: decoding would keep the last
// value silently, so {"a":1,"a":2} and {"a":2} would hash alike although a
// producer in another language may read the first as a = 1. path names
// the value in errors ($, $.a, $[3]).
func decodeValue(dec *json.Decoder, path string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string) // the decoder only yields a string here
			at := path + "." + strconv.Quote(k)
			if isPlainName(k) {
				at = path + "." + k
			}
			if _, dup := obj[k]; dup {
				return nil, fmt.Errorf("%w: payload object %s names the key %q twice; a decoder would keep one of the values silently, so refuse it and send each key once", ErrInvalid, path, k)
			}
			v, err := decodeValue(dec, at)
			if err != nil {
				return nil, err
			}
			obj[k] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, err
		}
		return obj, nil
	case json.Delim('['):
		arr := []any{}
		for i := 0; dec.More(); i++ {
			v, err := decodeValue(dec, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, err
		}
		return arr, nil
	default:
		return tok, nil // json.Number, string, bool or nil
	}
}

// isPlainName reports whether k can follow a '.' in a path unquoted.
func isPlainName(k string) bool {
	return k != "" && strings.IndexFunc(k, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0
}
