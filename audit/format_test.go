package audit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
	}{
		{"", FormatAuto},
		{"auto", FormatAuto},
		{"native", FormatNative},
		{"CloudEvents", FormatCloudEvents},
		{" intercept ", FormatIntercept},
		{"docker", FormatDocker},
	} {
		got, err := ParseFormat(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	_, err := ParseFormat("jsonl")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"jsonl"`)
	assert.Contains(t, err.Error(), "auto, native, cloudevents, intercept, docker")
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	assert.Equal(t, FormatAuto, o.Format)
	assert.Equal(t, 65536, o.MaxEventBytes)
	assert.Equal(t, 1024, o.MaxFieldBytes)
	o = Options{MaxEventBytes: 10, MaxFieldBytes: 3}.withDefaults()
	assert.Equal(t, 10, o.MaxEventBytes)
	assert.Equal(t, 3, o.MaxFieldBytes)
}

func TestRejection(t *testing.T) {
	r := reject(ReasonBadTS, "%q is bad", "ts")
	assert.Equal(t, `bad_ts: "ts" is bad`, r.Error())
	assert.Equal(t, ReasonBadTS, ReasonOf(r))
	assert.Equal(t, ReasonBadTS, ReasonOf(fmt.Errorf("line 3: %w", r)))
	assert.Equal(t, "", ReasonOf(nil))
	assert.Equal(t, "", ReasonOf(errors.New("boom")))
	for _, reason := range Reasons {
		assert.True(t, KnownReason(reason))
	}
	assert.False(t, KnownReason("nope"))
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "event", KindEvent.String())
	assert.Equal(t, "skipped", KindSkipped.String())
	assert.Equal(t, "intercept_startup", KindInterceptStartup.String())
	assert.Equal(t, "invalid", Kind(0).String())
}
