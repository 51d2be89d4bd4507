-- leasehold schema, version 10 (SQLite): the trace an episode belongs to.
-- The translation of sql/schema/postgres/00010.
--
-- trace_parent is the W3C trace context (a traceparent header, optionally
-- followed by ";" and its tracestate) of the span that fired the episode's
-- trigger, stored with the episode by the creating statement, so that
-- every attempt, on whichever node runs it (after an overflow, a retry or
-- a recovery), continues that trace. NULL: no trace. It decides nothing.

-- +goose Up
ALTER TABLE leasehold_episodes ADD COLUMN trace_parent TEXT;

-- +goose Down
ALTER TABLE leasehold_episodes DROP COLUMN trace_parent;
