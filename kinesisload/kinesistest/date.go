package kinesistest

import (
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/scan"
)

// setDate records the fake's clock in a response's metadata as Kinesis's
// HTTP Date header would carry it: floored to the whole second. The SDK
// keeps the Date of a real response in the same metadata; [scan.ServerTime]
// reads either, so code that takes Kinesis's clock from its answers works
// on the fake as on Kinesis.
func setDate(md *middleware.Metadata, now time.Time) {
	scan.SetServerTime(md, now.Truncate(time.Second))
}
