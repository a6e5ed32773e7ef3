package kinesistest

import (
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The constructors below build the SDK's typed errors with messages worded
// like the real service's, so code under test sees what it would see from
// Kinesis.

func errInvalidArgument(format string, args ...any) error {
	return &types.InvalidArgumentException{Message: aws.String(fmt.Sprintf(format, args...))}
}

func (f *Fake) errStreamNotFound(name string) error {
	return &types.ResourceNotFoundException{Message: aws.String(fmt.Sprintf(
		"Stream %s under account %s not found.", name, f.cfg.account))}
}

func (f *Fake) errShardNotFound(stream, shard string) error {
	return &types.ResourceNotFoundException{Message: aws.String(fmt.Sprintf(
		"Shard %s in stream %s under account %s does not exist", shard, stream, f.cfg.account))}
}

func (f *Fake) errStreamExists(name string) error {
	return &types.ResourceInUseException{Message: aws.String(fmt.Sprintf(
		"Stream %s under account %s already exists.", name, f.cfg.account))}
}

func (f *Fake) errThrottled(stream, shard string) error {
	return &types.ProvisionedThroughputExceededException{Message: aws.String(f.throttleMessage(stream, shard))}
}

func (f *Fake) throttleMessage(stream, shard string) string {
	return fmt.Sprintf("Rate exceeded for shard %s in stream %s under account %s.", shard, stream, f.cfg.account)
}

func (f *Fake) errShardLimit(current, additional int) error {
	return &types.LimitExceededException{Message: aws.String(fmt.Sprintf(
		"This request would exceed the shard limit for the account %s in %s. Current shard count for the account: %d. Limit: %d. Number of additional shards that would have resulted from this request: %d.",
		f.cfg.account, f.cfg.region, current, f.cfg.shardLimit, additional))}
}

func errExpiredIterator(issued, now time.Time) error {
	const layout = "Mon Jan 02 15:04:05 MST 2006"
	return &types.ExpiredIteratorException{Message: aws.String(fmt.Sprintf(
		"Iterator expired. The iterator was created at time %s while right now it is %s which is further in the future than the tolerated delay of %d milliseconds.",
		issued.UTC().Format(layout), now.UTC().Format(layout), iteratorTTL.Milliseconds()))}
}

func errExpiredNextToken() error {
	return &types.ExpiredNextTokenException{Message: aws.String("The timestamp of the last request is more than 300 seconds in the past. Request a new NextToken.")}
}
