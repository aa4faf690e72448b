"""``simulate import-aiconfigurator``: NVIDIA AIConfigurator's kernel tables as tidy files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.app import app
from simulator.config.errors import ConfigError


@app.command("import-aiconfigurator")
def import_aiconfigurator(
    gpu: Annotated[str, typer.Option(help="Catalog GPU (h100-sxm, b200, ...) or AIConfigurator system (h100_sxm, gb300, ...).")],
    out: Annotated[Path, typer.Option(help="Folder for the tidy tables (one file per backend).")],
    backend: Annotated[list[str] | None, typer.Option(help="vllm, sglang or trtllm; repeat for several (default: all three).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet or csv.")] = "parquet",
    data: Annotated[Path | None, typer.Option(help="The database folder (default ../shared/data/profiles/aiconfigurator).")] = None,
) -> None:
    """Turn one system's AIConfigurator tables (GEMM, attention, MLA, MoE, all-reduce) into one tidy
    file per backend with all its versions in one table (SYSTEM_BACKEND_VERSIONS.FORMAT, the versions joined
    by '-'): system, backend, version, family, table, kernel_source, dtype, the table's keys and latency_s
    (seconds per call on one GPU)."""
    from simulator.costmodel.aic.tables import BACKENDS, data_root, write_tidy
    from simulator.util.paths import check_out_dir

    # what an earlier import wrote may be replaced; anything else there is refused before the work
    # (paths first, as every command checks them, whether or not the database is there)
    check_out_dir(out, "--out", replaceable=("*.parquet", "*.csv"))
    twice = sorted({b for b in backend or () if list(backend or ()).count(b) > 1})
    if twice:  # (the same table was written twice)
        raise ConfigError("--backend", f"{twice[0]} given twice", "give each backend once")
    try:  # this command's flag, not a run's --kernels (which the shared reader's message names)
        data_root(data)
    except ConfigError as err:
        raise ConfigError("--data", err.problem, "pass --data FOLDER, the database folder holding "
                          "systems/data") from None
    def say_lacking(system: str, name: str, tables: list[str]) -> None:  # said on stderr: the paths stay stdout's
        typer.echo(f"note: {system} {name}: no rows of {', '.join(tables)}", err=True)

    for path in write_tidy(gpu, tuple(backend or BACKENDS), out, fmt, data, on_lacking=say_lacking):
        typer.echo(str(path))
