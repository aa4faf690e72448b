"""Writing a run's results: tidy tables plus the config that reproduces them.

An output folder holds ``requests.{parquet,csv}`` (one row per request),
``iterations.{parquet,csv}`` (one row per iteration; per micro-batch with pipeline
parallelism, plus ``stages.{parquet,csv}``: one row per micro-batch and stage), ``summary.json`` (headline
metrics) and ``config.json`` (the exact :class:`~simulator.config.run_config.RunConfig`; pass it
back with ``simulate run --config`` to reproduce the run bit for bit; its ``report`` section holds how
``simulate run`` reported it, its SLOs, views and table format, which that takes back where not given again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.config.errors import ConfigError
from simulator.config.inputs import INPUTS_KEY, inputs_record
from simulator.config.run_config import REPORT_KEY
from simulator.util.jsonio import jsonable

if TYPE_CHECKING:  # pandas and the engine load when something is written, not on import
    import pandas as pd

    from simulator.config.run_config import RunConfig
    from simulator.engine.cluster import RunResult

FORMATS = ("parquet", "csv")


def check_format(fmt: str) -> None:
    """Refuse an unknown table format before any work is done."""
    if fmt not in FORMATS:
        raise ConfigError("--format", f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")


# What a run folder holds: a folder holding only these (an earlier run) may be replaced whole.
RUN_FILES = ("config.json", "summary.json", "requests.*", "iterations.*", "stages.*", "handoff.*",
             "*.png", "*.svg")  # (and the figures `plot run` writes beside them, replaced with the run)


def check_out_dir(out_dir: Path) -> None:
    """Refuse a run's output folder before any work is done: it must be new, empty or an
    earlier run's (:func:`simulator.util.paths.check_out_dir`); nothing is created."""
    from simulator.util.paths import check_out_dir as check

    check(out_dir, "--out", replaceable=RUN_FILES)


def write_table(df: pd.DataFrame, path_stem: Path, fmt: str) -> Path:
    path = path_stem.with_suffix(f".{fmt}")
    tmp = path.with_suffix(path.suffix + ".tmp")
    if fmt == "parquet":
        df.to_parquet(tmp, index=False)
    else:
        df.to_csv(tmp, index=False)
    tmp.replace(path)  # never leave a half-written table under the final name
    return path


def write_chunks(chunks: Iterable[dict[str, Any]], path_stem: Path, fmt: str) -> Path:
    """Write a table given as column-dict chunks (equal columns, numpy arrays) one chunk at a
    time: parquet row groups, or CSV appends. Memory holds one chunk, not the table."""
    path = path_stem.with_suffix(f".{fmt}")
    tmp = path.with_suffix(path.suffix + ".tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        try:
            for chunk in chunks:
                table = pa.table(chunk)
                if writer is None:
                    # No dictionary for float columns: times and latencies are nearly all distinct,
                    # so it never pays, and trying costs (1M-row chunks of a cluster's iteration
                    # table: 3.3 s instead of 5.2 to encode, and a smaller file).
                    writer = pq.ParquetWriter(tmp, table.schema, use_dictionary=[
                        field.name for field in table.schema if not pa.types.is_floating(field.type)])
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
    else:
        import pandas as pd

        for i, chunk in enumerate(chunks):
            pd.DataFrame(chunk).to_csv(tmp, mode="w" if i == 0 else "a", header=i == 0, index=False)
    tmp.replace(path)  # never leave a half-written table under the final name
    return path


def column_chunks(columns: dict[str, Any], chunk_rows: int = 1 << 20) -> Iterator[dict[str, Any]]:
    """Equal-length numpy columns as column dicts of at most ``chunk_rows`` rows (views, no
    copies; one empty chunk for no rows), for :func:`write_chunks`."""
    num_rows = len(next(iter(columns.values()))) if columns else 0
    for start in range(0, max(num_rows, 1), chunk_rows):
        yield {name: values[start:start + chunk_rows] for name, values in columns.items()}


_END = object()


def prefetched(items: Iterator[Any], pool: Executor) -> Iterator[Any]:
    """``items``, each next one computed in ``pool`` while the caller works on the one before
    (one at a time: the iterator is never advanced by two threads at once)."""
    future = pool.submit(next, items, _END)
    while (item := future.result()) is not _END:
        future = pool.submit(next, items, _END)
        yield item


def write_run(result: RunResult, out_dir: Path, fmt: str = "parquet", summary: dict[str, Any] | None = None,
              requests: pd.DataFrame | dict[str, Any] | None = None,
              report: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write a run's tables (requests and iterations, each in chunks), ``summary.json`` and
    ``config.json``. ``requests``: its :func:`~simulator.report.metrics.request_columns` (or frame), if built;
    ``report``: how the run was reported (config.json's ``report`` section, :data:`~simulator.config.run_config.REPORT_KEY`)."""
    check_format(fmt)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--out", f"{out_dir} exists and is not a folder", "pass a folder path")
    out_dir.mkdir(parents=True, exist_ok=True)
    from simulator.report.metrics import request_columns, summarize

    requests = request_columns(result) if requests is None else requests
    summary = summarize(result, requests) if summary is None else summary
    columns = requests if isinstance(requests, dict) else {name: requests[name].to_numpy() for name in requests.columns}
    from simulator.report.benchmark import measured_requests, warmup_count

    if warmup_count(result) and "request_id" in columns:  # the rows every figure of summary.json leaves out
        columns = {**columns, "is_warmup": ~measured_requests(result, columns["request_id"])}
    # The two tables are written side by side, and the iteration table's next chunk is gathered
    # while one is written: pyarrow's writer and numpy's gathers release the GIL, so a large run
    # writes on two cores (a million-request cluster: 4.1-5.3 s instead of 5.9-7.0 one after the other).
    with ThreadPoolExecutor(max_workers=2) as pool:
        requests_written = pool.submit(write_chunks, column_chunks(columns), out_dir / "requests", fmt)
        paths = {"iterations": write_chunks(prefetched(result.iteration_chunks(), pool), out_dir / "iterations", fmt)}
        paths["requests"] = requests_written.result()
    if result.config.replica.pp > 1:  # one row per (micro-batch, pipeline stage)
        paths["stages"] = write_table(result.stage_frame(), out_dir / "stages", fmt)
    paths["summary"] = out_dir / "summary.json"
    paths["summary"].write_text(json.dumps(jsonable(summary), indent=2, sort_keys=True) + "\n")
    paths["config"] = out_dir / "config.json"
    data = portable_config(result.config)
    if report is not None:
        data[REPORT_KEY] = report
    if files := inputs_record(result.config):  # what each file it read held: a reproduction can tell it changed
        data[INPUTS_KEY] = files
    paths["config"].write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return paths


def portable_config(config: RunConfig) -> dict[str, Any]:
    """``config`` as ``config.json`` holds it: every file it names (a trace, a model's or GPU's file, a
    fitted cost model or engine, a draft's config) made absolute, so ``simulate run --config`` reproduces the
    run from any folder, not only the one it was made in (a relative path read relative to the new one)."""
    from simulator.config.hf_config import is_path_like

    def absolute(value: Any) -> Any:
        if isinstance(value, str) and is_path_like(value) and Path(value).exists():
            return str(Path(value).resolve())
        return value

    data = config.to_dict()
    data["workload"]["trace"] = absolute(data["workload"]["trace"])
    for key in ("model", "gpu"):
        data["replica"][key] = absolute(data["replica"][key])
    for key in ("cost_model", "engine"):
        data[key] = absolute(data[key])
    if data.get("speculative"):
        data["speculative"]["draft_model"] = absolute(data["speculative"].get("draft_model"))
    return data
