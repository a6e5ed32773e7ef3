package kotel_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidemark/tidemark/kinesisload/kotel"
)

// newMetrics returns a Metrics on an SDK MeterProvider read by a
// ManualReader (cumulative temporality, the default).
func newMetrics(t *testing.T, opts ...kotel.Option) (*kotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := kotel.New(mp, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, reader
}

// collect reads every metric of kotel's scope, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != kotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, kotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// key renders an attribute set as "k=v,k=v" in key order.
func key(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// ints returns the data points of an int64 counter or gauge by attribute
// key; nil when the metric is absent.
func ints(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return nil
	}
	var dps []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		dps = d.DataPoints
	case metricdata.Gauge[int64]:
		dps = d.DataPoints
	default:
		t.Fatalf("%s: data %T, want an int64 sum or gauge", name, m.Data)
	}
	out := map[string]int64{}
	for _, dp := range dps {
		out[key(dp.Attributes)] = dp.Value
	}
	return out
}

// floats is ints for a float64 gauge.
func floats(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]float64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return nil
	}
	d, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s: data %T, want a float64 gauge", name, m.Data)
	}
	out := map[string]float64{}
	for _, dp := range d.DataPoints {
		out[key(dp.Attributes)] = dp.Value
	}
	return out
}

// hist is what a test compares of a histogram data point.
type hist struct {
	Count   uint64
	Sum     float64
	Bounds  []float64
	Buckets []uint64
}

// hists returns the data points of a histogram by attribute key.
func hists(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]hist {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return nil
	}
	out := map[string]hist{}
	switch d := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out[key(dp.Attributes)] = hist{dp.Count, dp.Sum, dp.Bounds, dp.BucketCounts}
		}
	case metricdata.Histogram[int64]:
		for _, dp := range d.DataPoints {
			out[key(dp.Attributes)] = hist{dp.Count, float64(dp.Sum), dp.Bounds, dp.BucketCounts}
		}
	default:
		t.Fatalf("%s: data %T, want a histogram", name, m.Data)
	}
	return out
}

// buckets returns bucket counts for len(bounds)+1 buckets with one count
// in each bucket that holds one of values.
func buckets(bounds []float64, values ...float64) []uint64 {
	out := make([]uint64, len(bounds)+1)
	for _, v := range values {
		i := sort.SearchFloat64s(bounds, v) // first bound >= v: buckets are (lo, hi]
		out[i]++
	}
	return out
}
