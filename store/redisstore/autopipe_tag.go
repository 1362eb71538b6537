//go:build diana_autopipeline

package redisstore

// autoPipelineTag makes every Store use the auto-pipeliner (see autopipe.go).
const autoPipelineTag = true
