package dynamo_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
)

// Each host of the fleet runs the same program: its Loader shares the
// stream with the others through the table.
func Example() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	coord, err := dynamo.New(dynamodb.NewFromConfig(awsCfg), dynamo.Config{
		Table:       "orders-loader",
		CreateTable: true, // needs dynamodb:CreateTable
	})
	if err != nil {
		log.Fatal(err)
	}
	var sink kinesisload.Sink // the destination
	l, err := kinesisload.New(kinesisload.Config{Stream: "orders", Sink: sink}, kinesisload.WithCoordinator(coord))
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
