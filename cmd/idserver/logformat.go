package main

import (
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// quoteNonUTF8 keeps JSON log lines byte-exact: a string value, or an
// error's text, that is not valid UTF-8 (a tag name is any bytes) is
// written Go-quoted ("\xff" as `"\xff"`), where encoding/json would put
// U+FFFD in place of each bad byte. The text format quotes such values
// itself.
func quoteNonUTF8(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch v := a.Value.Any().(type) {
	case string:
		s = v
	case error:
		s = v.Error()
	default:
		return a
	}
	if utf8.ValidString(s) {
		return a
	}
	return slog.String(a.Key, strconv.Quote(s))
}
