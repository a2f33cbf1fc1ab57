package server

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// apiError is an error answered in vLLM's shape,
// {"error":{"message","type","param","code"}}, where code repeats the HTTP
// status as a number (not an OpenAI string code).
type apiError struct {
	status int
	typ    string
	msg    string
	param  *string
}

func (e *apiError) Error() string { return e.msg }

func strp(s string) *string { return &s }

// badRequest is vLLM's VLLMValidationError as create_error_response
// renders it: type BadRequestError, and the message ends with
// "(parameter=P, value=V)" when the error names them, as the exception's
// __str__ does. value is omitted when nil.
func badRequest(msg, param string, value any) *apiError {
	e := &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: vllmErrorText(msg, param, value)}
	if param != "" {
		e.param = strp(param)
	}
	return e
}

// plainBadRequest is a 400 from a plain ValueError (no parameter).
func plainBadRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: msg}
}

// vllmErrorText appends " (parameter=..., value=...)" as
// VLLMValidationError.__str__ does.
func vllmErrorText(msg, param string, value any) string {
	var extras []string
	if param != "" {
		extras = append(extras, "parameter="+param)
	}
	if value != nil {
		extras = append(extras, "value="+pyStr(value))
	}
	if len(extras) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(extras, ", ") + ")"
}

func notFound(msg string) *apiError {
	// The model check names the field; vLLM on the wire reports param
	// "model" for it.
	return &apiError{status: http.StatusNotFound, typ: "NotFoundError", msg: msg, param: strp("model")}
}

func internalError(msg string) *apiError {
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: msg}
}

func unavailable(msg string) *apiError {
	// vLLM renders HTTP errors it raises itself with the status phrase as
	// the type.
	return &apiError{status: http.StatusServiceUnavailable, typ: "Service Unavailable", msg: msg}
}

// validationError is what vLLM's RequestValidationError handler answers
// for a body pydantic rejects: 400, type "Bad Request", a message listing
// the error as Python prints the error dict, and param the dotted location
// (or the parameter a vLLM validator named).
type validationError struct {
	typ   string // pydantic error type, e.g. int_parsing
	loc   []any  // e.g. "body", "max_tokens"
	msg   string
	input any    // summarized input value, nil for none
	ctx   string // the ctx.error repr, "" for none
	param string // overrides the param derived from loc
}

func (v *validationError) apiError() *apiError {
	var b strings.Builder
	b.WriteString("1 validation error:\n  {'type': ")
	b.WriteString(pyRepr(v.typ))
	b.WriteString(", 'loc': (")
	for i, l := range v.loc {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyReprAny(l))
	}
	if len(v.loc) == 1 {
		b.WriteString(",")
	}
	b.WriteString("), 'msg': ")
	b.WriteString(pyRepr(v.msg))
	b.WriteString(", 'input': ")
	b.WriteString(pyReprAny(v.input))
	if v.ctx != "" {
		b.WriteString(", 'ctx': {'error': ")
		b.WriteString(v.ctx)
		b.WriteString("}")
	}
	b.WriteString("}")
	param := v.param
	if param == "" {
		parts := make([]string, len(v.loc))
		for i, l := range v.loc {
			parts[i] = pyStr(l)
		}
		param = strings.Join(parts, ".")
	}
	return &apiError{status: http.StatusBadRequest, typ: "Bad Request", msg: b.String(), param: strp(param)}
}

// modelValidatorError is a VLLMValidationError raised by one of vLLM's
// "before" model validators: pydantic wraps it as a value_error located at
// the body. nfields is the number of fields of the body (pydantic's input
// summary is "<dict of N items>").
func modelValidatorError(msg, param string, value any, nfields int) *apiError {
	text := vllmErrorText(msg, param, value)
	v := &validationError{
		typ:   "value_error",
		loc:   []any{"body"},
		msg:   "Value error, " + text,
		input: fmt.Sprintf("<dict of %d items>", nfields),
		ctx:   "VLLMValidationError(" + pyRepr(msg) + ")",
		param: param,
	}
	if param == "" {
		v.param = "body"
	}
	return v.apiError()
}

// engineError maps an error of Engine.Submit (or an Output.Err) to the
// answer: a full queue is 503, a closed engine 503 (vLLM answers 500 from
// a dead engine and then exits; we keep serving /health with 503), a
// prompt the cache cannot hold or a rejected field 400, anything else 500.
func engineError(err error) *apiError {
	text := strings.TrimPrefix(err.Error(), "engine: ")
	switch {
	case errors.Is(err, engine.ErrOverloaded):
		return unavailable(text)
	case errors.Is(err, engine.ErrClosed):
		return unavailable(text)
	case errors.Is(err, engine.ErrPromptTooLong), errors.Is(err, engine.ErrInvalid):
		return plainBadRequest(text)
	}
	return internalError(text)
}

// errorBody is the JSON of an error response.
type errorBody struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (e *apiError) body() errorBody {
	return errorBody{Error: errorInfo{Message: e.msg, Type: e.typ, Param: e.param, Code: e.status}}
}

// writeError answers e as JSON.
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, e.body())
}

// writeDetail answers FastAPI's shape for routing errors,
// {"detail": "Not Found"}.
func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]string{"detail": detail})
}

// pyRepr renders s as Python's repr of a str: single quotes unless s holds
// a single quote and no double quote.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyReprAny is repr() of a location element or an input summary.
func pyReprAny(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return pyRepr(x)
	case int:
		return fmt.Sprint(x)
	}
	return pyRepr(pyStr(v))
}

// pyStr is Python's str() of a decoded JSON value, enough for error
// messages.
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		switch {
		case math.IsNaN(x):
			return "nan"
		case math.IsInf(x, 1):
			return "inf"
		case math.IsInf(x, -1):
			return "-inf"
		}
		return string(appendPyFloat(nil, x))
	case []any:
		return fmt.Sprintf("<list of %d items>", len(x))
	case map[string]any:
		return fmt.Sprintf("<dict of %d items>", len(x))
	}
	return fmt.Sprint(v)
}
