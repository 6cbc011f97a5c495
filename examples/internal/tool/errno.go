package tool

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Errno returns the errno err wraps, as librdmacm would leave it in errno.
func Errno(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e, true
	}
	return 0, false
}

// Status is the value a librdmacm call's caller sees for err: -errno when
// err wraps an errno, -1 otherwise (and 0 for nil).
func Status(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := Errno(err); ok {
		return -int(e)
	}
	return -1
}

// Strerror returns glibc's text for an errno ("Address already in use").
func Strerror(e syscall.Errno) string {
	s := e.Error()
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// Perror prints err as perror(3) does after a failed librdmacm call,
// "what: Strerror(errno)", and adds cmrt's account of the failure in
// parentheses when it says more than the errno text.
func Perror(w io.Writer, what string, err error) {
	fmt.Fprintln(w, PerrorText(what, err))
}

// PerrorText is the line Perror prints, without the newline.
func PerrorText(what string, err error) string {
	e, ok := Errno(err)
	if !ok {
		return what + ": " + err.Error()
	}
	return what + ": " + Strerror(e) + Account(err)
}

// Account returns cmrt's account of err in parentheses, after a space, when
// it says more than the text of the errno err wraps; otherwise "".
func Account(err error) string {
	e, ok := Errno(err)
	if !ok {
		return " (" + err.Error() + ")"
	}
	if detail := err.Error(); detail != e.Error() && !strings.EqualFold(detail, Strerror(e)) {
		return " (" + detail + ")"
	}
	return ""
}
