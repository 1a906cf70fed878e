"""Run Holistic Trace Analysis 0.5 on a folder of traces and print its figures as JSON.

Executed by the interpreter of a separate virtualenv that has holistictraceanalysis
installed (HTA pins its own pandas/jupyter stack), never imported by the suite.
Usage: python hta_probe.py TRACE_DIR
"""

import json
import logging
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402

ta = TraceAnalysis(trace_dir=sys.argv[1])
tb = ta.get_temporal_breakdown(visualize=False)
ov = ta.get_comm_comp_overlap(visualize=False)
idle = {}
for rank in ta.t.get_ranks():
    df = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
    idle[str(rank)] = {str(int(r["stream"])): {} for _, r in df.iterrows()}
    for _, r in df.iterrows():
        idle[str(rank)][str(int(r["stream"]))][r["idle_category"]] = float(r["idle_time"])
out = {"temporal": tb.to_dict(orient="records"), "overlap": ov.to_dict(orient="records"), "idle": idle}
print(json.dumps(out, default=float))
