package fleet

import (
	"reflect"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
)

// Every zero field of a Config literal means its default: after defaults,
// a field is either set or one whose default is its zero value (listed
// with why). A field added later whose zero means something else fails
// here.
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	zeroIsDefault := map[string]string{
		"BalanceBy":    "BalanceByCount is the zero BalanceBy",
		"ManualRounds": "rounds run on their own",
	}
	got, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if _, ok := zeroIsDefault[name]; ok {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("Config{}.%s is still zero after defaults: a zero that is not documented as its default", name)
		}
	}
	if got.BalanceBy != kinesisload.BalanceByCount {
		t.Errorf("the default BalanceBy = %v, want BalanceByCount", got.BalanceBy)
	}
}
