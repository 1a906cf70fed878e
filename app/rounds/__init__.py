"""Live interview rounds: the question bank, rounds and their append-only event log,
hints, notes, scorecards, and the wake-up that carries events to every worker."""
