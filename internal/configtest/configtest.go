// Package configtest checks, for the tests of every package with a Config,
// that the zero value of each field means its default.
package configtest

import (
	"reflect"
	"testing"
)

// ZeroMeansDefault fails t for each field of the struct withDefaults (a
// Config literal's zero value after its package filled in the defaults)
// that is still zero, unless zeroIsDefault names it (with why its default
// is its zero value). A field added later whose zero means something else
// (as kinesisload's SinkRetries 0 once meant "no retry") fails here.
func ZeroMeansDefault(t testing.TB, withDefaults any, zeroIsDefault map[string]string) {
	t.Helper()
	v := reflect.ValueOf(withDefaults)
	if v.Kind() != reflect.Struct {
		t.Fatalf("configtest: %T is not a struct", withDefaults)
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if _, ok := zeroIsDefault[name]; ok {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("%s{}.%s is still zero after defaults: a zero that is not documented as its default", v.Type().Name(), name)
		}
	}
}
