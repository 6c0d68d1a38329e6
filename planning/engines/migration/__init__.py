"""The generation-migration planner, a pure engine: inputs, facility checks, scheduling, naive
sequences, fixes and the result (see ``planner.plan_migration``)."""
