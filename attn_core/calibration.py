"""Published peak-memory measurements beside :func:`attn_core.training.training_memory`'s predictions.

``data/calibration.json`` holds each run as published: the model (a preset of
:data:`attn_core.models.MODELS` or a config.json read by
:meth:`~attn_core.models.ModelConfig.from_hf_config`), the arguments of
:func:`~attn_core.training.training_memory` that describe how it ran, the measured peak, its unit and
the counter that measured it (allocated, active, reserved), the source (repository, path, commit) and
a quote. A reserved reading holds the allocator's cache too, which no count of tensors predicts: it is
compared with the reading less an allowance, stated in the file with its evidence. The page
notebooks/95_calibration.ipynb shows the comparison; tests/test_calibration.py checks it.
"""

from __future__ import annotations

import functools
import json
import pathlib
import statistics

from .models import MODELS, ModelConfig
from .training import training_memory

__all__ = ["CALIBRATION_FILE", "UNITS", "calibration_data", "row_model", "predict", "compare", "compare_all",
           "median_error"]

CALIBRATION_FILE = pathlib.Path(__file__).parent / "data" / "calibration.json"
#: a published unit -> bytes
UNITS = {"GiB": 2**30, "GB": 10**9}


@functools.cache
def _load() -> str:
    return CALIBRATION_FILE.read_text()


def calibration_data() -> dict:
    """The calibration file, parsed (a fresh copy each call)."""
    return json.loads(_load())


def row_model(row: dict) -> ModelConfig:
    """The row's model: a preset by name, or its config.json."""
    model = row["model"]
    if isinstance(model, str):
        return MODELS[model]
    return ModelConfig.from_hf_config(model, name=model.get("_name_or_path"))


def predict(row: dict) -> dict:
    """training_memory of the run the row describes (bytes, by item and phase)."""
    config = dict(row["config"])
    N = config.pop("N")
    if "lora_modules" in config:
        config["lora_modules"] = tuple(config["lora_modules"])
    return training_memory(row_model(row), N, **config)


def compare(row: dict, allowance: float) -> dict:
    """The row's reading in bytes, what the prediction is compared with (the reading, or a reserved
    reading less ``allowance`` of it), the prediction, their ratio and the relative error."""
    measured = row["measured"]["value"] * UNITS[row["measured"]["unit"]]
    target = measured * (1 - allowance) if row["counter"] == "reserved" else measured
    out = predict(row)
    ratio = out["peak"] / target
    return {"id": row["id"], "measured": measured, "target": target, "predicted": out["peak"],
            "phase": out["peak_phase"], "ratio": ratio, "error": abs(ratio - 1), "within": abs(ratio - 1)
            <= row["tolerance"], "prediction": out}


def compare_all(data: dict | None = None) -> list[dict]:
    """:func:`compare` for every row, with the file's allowance."""
    data = calibration_data() if data is None else data
    allowance = data["reserved_allowance"]["fraction"]
    return [compare(row, allowance) for row in data["rows"]]


def median_error(results: list[dict]) -> float:
    return statistics.median(r["error"] for r in results)
