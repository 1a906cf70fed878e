"""The candidate's marks on the timeline, scored against the key's: "one step" within 5%
of the step period, and "the gap" overlapping the key's principal gap with IoU >= 0.5."""

from __future__ import annotations

STEP_TOLERANCE = 0.05
GAP_IOU = 0.5


def iou(a: dict, b: dict) -> float:
    inter = max(0.0, min(a["end_us"], b["end_us"]) - max(a["start_us"], b["start_us"]))
    union = max(a["end_us"], b["end_us"]) - min(a["start_us"], b["start_us"])
    return inter / union if union > 0 else 0.0


def score_marks(key: dict, marks: dict) -> dict:
    """Per mark: what was marked, what the key holds, and whether it is right."""
    step_ms = next(o["value"] for o in key["observations"] if o["id"] == "step_ms")
    out: dict = {}
    step = marks.get("step")
    if step:
        said = (step["end_us"] - step["start_us"]) / 1e3
        out["step"] = {"marked_ms": round(said, 3), "expected_ms": step_ms,
                       "ok": abs(said - step_ms) <= STEP_TOLERANCE * step_ms}
    else:
        out["step"] = {"marked_ms": None, "expected_ms": step_ms, "ok": False}
    gap, want = marks.get("gap"), key["marks"]["gap"]
    expected = {"start_us": want["start_us"], "end_us": want["end_us"]}
    if gap:
        v = iou(gap, want)
        out["gap"] = {"marked": gap, "expected": expected, "iou": round(v, 3), "ok": v >= GAP_IOU}
    else:
        out["gap"] = {"marked": None, "expected": expected, "iou": 0.0, "ok": False}
    return out
