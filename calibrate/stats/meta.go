package stats

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Version is the file format version this package writes and reads.
const Version = "1"

// Metadata keys of a statistics file's "__metadata__".
const (
	keyVersion      = "lowbit_stats_version"
	keyModelType    = "model_type"
	keyConfigSHA256 = "config_sha256"
	keySamples      = "samples"
	keyTokens       = "tokens"
	keySeqLen       = "seq_len"
	keyDataset      = "dataset"
	keyCreatedBy    = "created_by"
)

var (
	// ErrMissing is wrapped by the error of a lookup of statistics the file
	// does not hold (a module that was not calibrated, a Hessian that was
	// not collected).
	ErrMissing = errors.New("no calibration statistics")
	// ErrInvalid is wrapped by every error that reports a statistics file,
	// or statistics given to Write, that break the format: bad metadata,
	// unknown tensor names, wrong dtypes or shapes, NaN, infinite or
	// negative values. Malformed safetensors files give errors wrapping
	// checkpoint.ErrCorrupt instead.
	ErrInvalid = errors.New("invalid calibration statistics")
	// ErrVersion is wrapped by the error for a file of another format
	// version, or one without lowbit's version key.
	ErrVersion = errors.New("unsupported calibration statistics version")
	// ErrWrongModel is wrapped by CheckModel's error when the statistics
	// were collected on a model with a different config.json.
	ErrWrongModel = errors.New("calibration statistics are for another model")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Meta describes how a statistics file was made.
type Meta struct {
	// ModelType is the model_type of the calibrated model's config.json.
	ModelType string
	// ConfigSHA256 is ConfigSHA256 of that config.json.
	ConfigSHA256 string
	// Samples is the number of calibration sequences; Tokens the number of
	// tokens run through the model; SeqLen the longest sequence.
	Samples, Tokens, SeqLen int64
	// Dataset names the calibration prompts ("HuggingFaceH4/ultrachat_200k:train_sft").
	Dataset string
	// CreatedBy names the tool that wrote the file ("lowbit dev").
	CreatedBy string
}

// ConfigSHA256 returns the lowercase hex SHA-256 of a config.json's bytes,
// which ties statistics to the model they were collected on. The bytes are
// hashed as read: a config.json that is reformatted or edited no longer
// matches, by design.
func ConfigSHA256(configJSON []byte) string {
	sum := sha256.Sum256(configJSON)
	return hex.EncodeToString(sum[:])
}

// validate checks m as Write requires and parseMeta guarantees.
func (m Meta) validate() error {
	switch {
	case m.ModelType == "":
		return invalidf("metadata %s is empty", keyModelType)
	case !isSHA256Hex(m.ConfigSHA256):
		return invalidf("metadata %s = %q, want 64 lowercase hex digits", keyConfigSHA256, m.ConfigSHA256)
	case m.Samples < 1:
		return invalidf("metadata %s = %d, want at least 1", keySamples, m.Samples)
	case m.SeqLen < 1:
		return invalidf("metadata %s = %d, want at least 1", keySeqLen, m.SeqLen)
	case m.Tokens < 1:
		return invalidf("metadata %s = %d, want at least 1", keyTokens, m.Tokens)
	case m.Tokens/m.Samples > m.SeqLen || (m.Tokens/m.Samples == m.SeqLen && m.Tokens%m.Samples != 0):
		// tokens > samples*seq_len, without overflowing the product.
		return invalidf("metadata %s = %d is more than %s × %s = %d × %d", keyTokens, m.Tokens, keySamples, keySeqLen, m.Samples, m.SeqLen)
	}
	for k, v := range map[string]string{keyModelType: m.ModelType, keyDataset: m.Dataset, keyCreatedBy: m.CreatedBy} {
		if !utf8.ValidString(v) {
			return invalidf("metadata %s is not valid UTF-8", k)
		}
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// encode returns m as a file's "__metadata__".
func (m Meta) encode() map[string]string {
	return map[string]string{
		keyVersion:      Version,
		keyModelType:    m.ModelType,
		keyConfigSHA256: m.ConfigSHA256,
		keySamples:      strconv.FormatInt(m.Samples, 10),
		keyTokens:       strconv.FormatInt(m.Tokens, 10),
		keySeqLen:       strconv.FormatInt(m.SeqLen, 10),
		keyDataset:      m.Dataset,
		keyCreatedBy:    m.CreatedBy,
	}
}

// parseMeta reads a file's "__metadata__". The version is checked first, so
// a file of another version is reported as such, whatever else it holds.
func parseMeta(md map[string]string) (Meta, error) {
	v, ok := md[keyVersion]
	if !ok {
		return Meta{}, fmt.Errorf("%w: no %s in the safetensors __metadata__: not a lowbit calibration statistics file", ErrVersion, keyVersion)
	}
	if v != Version {
		return Meta{}, fmt.Errorf("%w: format version %q, and this lowbit reads version %q: rerun lowbit calibrate, or use the lowbit that wrote the file", ErrVersion, v, Version)
	}
	var m Meta
	for _, f := range []struct {
		key string
		s   *string
	}{{keyModelType, &m.ModelType}, {keyConfigSHA256, &m.ConfigSHA256}, {keyDataset, &m.Dataset}, {keyCreatedBy, &m.CreatedBy}} {
		s, ok := md[f.key]
		if !ok {
			return Meta{}, invalidf("metadata has no %s", f.key)
		}
		*f.s = s
	}
	for _, f := range []struct {
		key string
		n   *int64
	}{{keySamples, &m.Samples}, {keyTokens, &m.Tokens}, {keySeqLen, &m.SeqLen}} {
		s, ok := md[f.key]
		if !ok {
			return Meta{}, invalidf("metadata has no %s", f.key)
		}
		n, err := parseCount(s)
		if err != nil {
			return Meta{}, invalidf("metadata %s = %q: %v", f.key, s, err)
		}
		*f.n = n
	}
	if err := m.validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// parseCount reads a decimal integer in canonical form: no sign, no leading
// zeros, no spaces, so that every value has exactly one spelling.
func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, errors.New("not a decimal integer")
	}
	return n, nil
}

// describe names the model and run a file was made from, for error messages.
func (m Meta) describe() string {
	return fmt.Sprintf("%s (config sha256 %s), %d samples of %q, by %s", m.ModelType, shortHash(m.ConfigSHA256), m.Samples, m.Dataset, m.CreatedBy)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
