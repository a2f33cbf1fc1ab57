package chat

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// TemplateError is the error a template raises itself with
// raise_exception(message), as jinja2.exceptions.TemplateError is in
// transformers. Message is the template's own text, meant for the client
// (e.g. "System message must be at the beginning.").
type TemplateError struct {
	Message string
}

func (e *TemplateError) Error() string { return "chat: template raised: " + e.Message }

func raiseException(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	msg := ""
	if len(args) > 0 {
		msg = printable(args[0])
	} else if m, ok := kwargs["message"]; ok {
		msg = printable(m)
	}
	return jinja.Value{}, &TemplateError{Message: msg}
}

// printable is str(v) for the scalar values a message is made of.
func printable(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsNone():
		return "None"
	case v.IsUndefined():
		return ""
	case v.IsFloat():
		return pyFloatRepr(v.AsFloat())
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	}
	return v.String()
}

// now is the clock strftime_now reads; tests replace it.
var now = time.Now

// strftimeNow is transformers' strftime_now(format):
// datetime.now().strftime(format), a naive local time (so %Z and %z are
// empty). It covers the C-locale directives; an unknown one is copied
// through, as glibc's strftime does.
func strftimeNow(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 || !args[0].IsString() {
		return jinja.Value{}, fmt.Errorf("strftime_now: takes one format string")
	}
	return jinja.NewString(strftime(now(), args[0].AsString())), nil
}

func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'e':
			b.WriteString(t.Format("_2"))
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'm':
			b.WriteString(t.Format("01"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'z', 'Z':
			// naive datetime: empty
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// maxRange is jinja2's sandbox MAX_RANGE: transformers renders in a
// sandboxed environment, whose range() refuses longer ranges.
const maxRange = 100000

// rangeBudget bounds the range elements one render may create in all; the
// engine has no step limit of its own, and nested ranges are the cheapest
// way for a template to loop for hours. Real chat templates use a handful.
const rangeBudget = 1000000

// newRange returns the sandbox's range() for one render.
func newRange() func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	spent := 0
	return func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		if len(kwargs) > 0 {
			return jinja.Value{}, fmt.Errorf("range() takes no keyword arguments")
		}
		var n [3]int64
		for i, a := range args {
			if i == 3 || !a.IsInt() && !a.IsBool() {
				return jinja.Value{}, fmt.Errorf("range() takes 1 to 3 integers")
			}
			if a.IsBool() {
				if a.AsBool() {
					n[i] = 1
				}
			} else {
				n[i] = a.AsInt()
			}
		}
		start, stop, step := int64(0), int64(0), int64(1)
		switch len(args) {
		case 1:
			stop = n[0]
		case 2, 3:
			start, stop = n[0], n[1]
			if len(args) == 3 {
				step = n[2]
			}
		default:
			return jinja.Value{}, fmt.Errorf("range expected at least 1 argument, got 0")
		}
		if step == 0 {
			return jinja.Value{}, fmt.Errorf("range() arg 3 must not be zero")
		}
		var count int64
		switch {
		case step > 0 && stop > start:
			count = (stop - start + step - 1) / step
		case step < 0 && stop < start:
			count = (start - stop - step - 1) / -step
		}
		if count > maxRange || count < 0 {
			return jinja.Value{}, fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
		}
		if spent += int(count); spent > rangeBudget {
			return jinja.Value{}, fmt.Errorf("chat: the template's ranges exceed %d elements in one render", rangeBudget)
		}
		items := make([]jinja.Value, count)
		for i := range items {
			items[i] = jinja.NewInt(start + int64(i)*step)
		}
		return jinja.NewList(items), nil
	}
}
