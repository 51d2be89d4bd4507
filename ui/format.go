package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Everything the templates print goes through html/template, which
// escapes it for its context (text, attribute, URL, SVG). These helpers
// only make stored text visible: a value holding a control character or
// another non-printable rune (a newline, ESC, a bidirectional override,
// invalid UTF-8) is shown Go-quoted, as the CLI shows it, so a key or a
// node name cannot fake a line or hide what it holds.

// visible is s as it is when every rune is printable, else Go-quoted.
func visible(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether s is valid UTF-8 made of printable runes
// (spaces included).
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// jsonDoc is a stored JSON document indented for reading, with every rune
// that is not printable written as a \u escape (inside a JSON string that
// means the same, so the text stays the same JSON). Text that is not JSON
// (SQL Server checks only some columns) is Go-quoted; "" when there is
// none.
func jsonDoc(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return strconv.Quote(string(raw))
	}
	return escapeUnprintable(b.String(), true)
}

// jsonLine is jsonDoc compacted onto one line, cut to at most limit runes.
func jsonLine(raw json.RawMessage, limit int) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return cut(strconv.Quote(string(raw)), limit)
	}
	return cut(escapeUnprintable(b.String(), false), limit)
}

// escapeUnprintable writes every non-printable rune of s as a \u escape;
// keepNewlines leaves the newlines of indentation alone.
func escapeUnprintable(s string, keepNewlines bool) string {
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == '\n' && keepNewlines:
			b.WriteRune(r)
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\ufffd`)
		case strconv.IsPrint(r):
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// cut shortens s to limit runes, marking the cut with an ellipsis.
func cut(s string, limit int) string {
	if limit <= 0 || utf8.RuneCountInString(s) <= limit {
		return s
	}
	r := []rune(s)
	return string(r[:limit-1]) + "…"
}

// stamp formats a database time, UTC, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// stampFull is stamp to the microsecond, for title attributes.
func stampFull(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000000Z07:00")
}

// ago is how long before now t was, "in …" when after it.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

// short is a duration rounded for reading: 850ms, 12.3s, 4m05s, 3h12m, 2d4h.
func short(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < time.Second:
		return neg + strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return neg + strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d < time.Minute:
		return neg + strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return neg + fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return neg + fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return neg + fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// bucket names a chart bucket's width: 30s, 2m, 1h, 6h.
func bucket(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d >= time.Second && d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return short(d)
}

// deref is *t, the zero time for nil.
func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// traceID is the trace ID of a stored W3C trace context (traceparent
// "00-<trace-id>-<parent-id>-<flags>", then ";" and the tracestate when
// there is one); "" when it is not one.
func traceID(traceContext string) string {
	tp, _, _ := strings.Cut(traceContext, ";")
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	for _, r := range parts[1] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return ""
		}
	}
	return parts[1]
}

var funcs = template.FuncMap{
	"traceID":   traceID,
	"visible":   visible,
	"printable": printable,
	"json":      jsonDoc,
	"jsonLine":  jsonLine,
	"stamp":     stamp,
	"stampFull": stampFull,
	"ago":       ago,
	"short":     short,
	"bucket":    bucket,
	"deref":     deref,
	// shortVersion: the first 8 characters of a workflow definition
	// version, enough to tell a workflow's versions apart.
	"shortVersion": func(v string) string {
		if len(v) > 8 {
			return v[:8]
		}
		return v
	},
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return visible(s)
	},
}
