// Package batch holds the hub's rules for the batch/v1 resources, jobs and
// cronjobs: their defaults (the generated job selector included),
// validation, status subresources, field selectors and printer columns, as
// upstream Kubernetes defines them. Schedules are parsed by internal/cron,
// which the cronjob controller shares.
package batch
