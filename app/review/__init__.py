"""Review by a hiring team, after the fact: who may review a round and whose scorecards
they see (access), the round replayed from its event log (replay), candidates, anchors and
the gold set, calibration statistics in DuckDB (calibration, stats), exports, and the
demo team's synthetic data (demo). Domain only: nothing here imports app.web or app.cli."""
