"""Length drift: "calibrate early, predict late".

A calibration sees its window's lengths; a run whose responses grow asks the model for steps it
never saw. ``drift_scores`` scores separately the predicted steps whose mean response is at least
``DRIFT_FACTOR`` times the calibration window's, per stage and for the step, beside the naive
predictor (the window's mean).
"""

from __future__ import annotations

import numpy as np

DRIFT_FACTOR = 2.0
MEAN_RESPONSE = "response_length/mean"


def drift_scores(cal_rows, test_rows, preds: list[dict], keys: list[str], factor: float = DRIFT_FACTOR) -> dict:
    """``{"window_mean_response", "factor", "steps", "accuracy": {key: {...}}}``; ``steps`` is 0
    (and ``accuracy`` empty) when no predicted step's responses grew that much."""
    window = float(np.mean([r.stats[MEAN_RESPONSE] for r in cal_rows])) if cal_rows else 0.0
    late = [(r, p) for r, p in zip(test_rows, preds) if r.stats.get(MEAN_RESPONSE, 0.0) >= factor * window > 0]
    out = {"window_mean_response": window, "factor": factor, "steps": len(late), "first_step": None, "accuracy": {}}
    if not late:
        return out
    out["first_step"] = late[0][0].step
    out["mean_response"] = float(np.mean([r.stats[MEAN_RESPONSE] for r, _ in late]))
    for k in keys:
        if not all(k in r.actual for r in cal_rows):
            continue
        a = np.array([r.actual[k] for r, _ in late])
        p = np.array([pr[k] for _, pr in late])
        naive = float(np.mean([r.actual[k] for r in cal_rows]))
        out["accuracy"][k] = {"accuracy": float(100 - 100 * np.mean(np.abs(p - a) / a)),
                              "naive_accuracy": float(100 - 100 * np.mean(np.abs(naive - a) / a)),
                              "mean_actual_s": float(a.mean()), "mean_predicted_s": float(p.mean())}
    return out
