package dedupe

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkEscapes refuses the \u escapes in raw's strings that would not
// survive: \u0000 (Postgres jsonb cannot store NUL), and a UTF-16 surrogate
// outside a pair (decoding turns it into U+FFFD, so payloads that differ
// only there would hash alike). raw is valid JSON, so every backslash is
// inside a string and a run of them escapes pairwise.
func checkEscapes(raw []byte) error {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u`))
		if j < 0 {
			return nil
		}
		at := i + j
		run := 1 // backslashes ending at raw[at]
		for at-run >= 0 && raw[at-run] == '\\' {
			run++
		}
		if run%2 == 0 { // an escaped backslash, then a plain 'u'
			i = at + 2
			continue
		}
		r := hex4(raw[at+2 : at+6])
		i = at + 6
		switch {
		case r == 0:
			return fmt.Errorf(`%w: payload holds NUL (\u0000), which Postgres jsonb cannot store`, ErrInvalid)
		case r >= 0xD800 && r < 0xDC00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u':
			if lo := hex4(raw[i+2 : i+6]); lo >= 0xDC00 && lo < 0xE000 {
				i += 6
				continue
			}
			fallthrough
		case r >= 0xD800 && r < 0xE000:
			return fmt.Errorf(`%w: payload holds the lone UTF-16 surrogate \u%04x, which decodes to U+FFFD`, ErrInvalid, r)
		}
	}
}

// hex4 decodes the 4 hex digits of a \u escape; valid JSON has them.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// invalidText finds a string in v that encoding/json would encode with its
// invalid UTF-8 replaced: a string value, a map key, a TextMarshaler's text,
// reached through the fields, elements and pointers encoding/json follows.
// MarshalJSON output is not walked: Canonical checks it as raw JSON. at
// names the string for the error, e.g. payload["blob"] or payload.Items[2].
func invalidText(v any) (at string, bad bool) {
	w := textWalker{onPath: map[uintptr]bool{}}
	return w.walk(reflect.ValueOf(v), "payload")
}

type textWalker struct {
	// onPath guards against cycles through pointers encoding/json did not
	// follow (a field hidden by a shallower one of the same name).
	onPath map[uintptr]bool
}

func (w textWalker) walk(v reflect.Value, at string) (string, bool) {
	if !v.IsValid() {
		return "", false
	}
	// The methods encoding/json picks: on the value, else, when the value
	// is addressable, on its pointer.
	if v.CanInterface() {
		t := v.Type()
		addr := t.Kind() != reflect.Pointer && v.CanAddr()
		if (addr && reflect.PointerTo(t).Implements(jsonMarshaler)) || t.Implements(jsonMarshaler) {
			return "", false
		}
		var tm reflect.Value
		switch {
		case addr && reflect.PointerTo(t).Implements(textMarshaler):
			tm = v.Addr()
		case t.Implements(textMarshaler):
			tm = v
		}
		if tm.IsValid() {
			if tm.Kind() == reflect.Pointer && tm.IsNil() {
				return "", false
			}
			b, err := tm.Interface().(encoding.TextMarshaler).MarshalText()
			return at, err == nil && !utf8.Valid(b)
		}
	}
	switch v.Kind() {
	case reflect.String:
		return at, !utf8.ValidString(v.String())
	case reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return w.walk(v.Elem(), at)
	case reflect.Pointer:
		if v.IsNil() || w.onPath[v.Pointer()] {
			return "", false
		}
		w.onPath[v.Pointer()] = true
		defer delete(w.onPath, v.Pointer())
		return w.walk(v.Elem(), at)
	case reflect.Map:
		return w.walkMap(v, at)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 && !implementsEither(reflect.PointerTo(v.Type().Elem())) {
			return "", false // []byte: base64
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if at, bad := w.walk(v.Index(i), at+"["+strconv.Itoa(i)+"]"); bad {
				return at, true
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if sf.Anonymous {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if at, bad := w.walk(v.Field(i), at+"."+name); bad {
				return at, true
			}
		}
	}
	return "", false
}

// walkMap checks a map's keys the way encoding/json names them (a string
// kind as it is, else a TextMarshaler's text) and its values, in key order
// so that the error is the same on every run.
func (w textWalker) walkMap(v reflect.Value, at string) (string, bool) {
	if v.IsNil() || w.onPath[v.Pointer()] {
		return "", false
	}
	w.onPath[v.Pointer()] = true
	defer delete(w.onPath, v.Pointer())
	type entry struct {
		name string
		val  reflect.Value
	}
	var entries []entry
	for it := v.MapRange(); it.Next(); {
		k, name := it.Key(), ""
		switch {
		case k.Kind() == reflect.String:
			name = k.String()
		case k.CanInterface() && k.Type().Implements(textMarshaler):
			if k.Kind() != reflect.Pointer || !k.IsNil() {
				b, _ := k.Interface().(encoding.TextMarshaler).MarshalText()
				name = string(b)
			}
		case k.CanInt():
			name = strconv.FormatInt(k.Int(), 10)
		case k.CanUint():
			name = strconv.FormatUint(k.Uint(), 10)
		}
		entries = append(entries, entry{name, it.Value()})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for _, e := range entries {
		here := at + "[" + strconv.Quote(e.name) + "]"
		if !utf8.ValidString(e.name) {
			return here, true
		}
		if at, bad := w.walk(e.val, here); bad {
			return at, true
		}
	}
	return "", false
}

func implementsEither(t reflect.Type) bool {
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler)
}
