package dynamo

import (
	"reflect"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
)

// Every zero field of a Config literal (but the required Table) means its
// default: after defaults, a field is either set or one whose default is
// its zero value (listed with why). A field added later whose zero means
// something else fails here.
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	zeroIsDefault := map[string]string{
		"CreateTable": "false: a missing table is an error, not created",
		"BalanceBy":   "BalanceByCount is the zero BalanceBy",
	}
	c := Config{Table: "leases"}
	got, _, err := c.withDefaults(c.fleetConfig())
	if err != nil {
		t.Fatalf("Config{Table: %q}: %v", c.Table, err)
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
	if _, _, err := (Config{}).withDefaults(Config{}.fleetConfig()); err == nil {
		t.Error("the zero Config (no Table) was accepted")
	}
}
