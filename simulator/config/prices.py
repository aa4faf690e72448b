"""GPU prices and power: what a planner needs to turn a layout into $/hour and joules.

One row per catalog GPU (:data:`PRICES`): an on-demand cloud list price per GPU-hour with
the source it was read from and when, and the board power at idle and at its limit.

Prices. One provider's list is used wherever it has the part, so the GPUs compare on one
footing: CoreWeave's public on-demand price list (per 8-GPU HGX node, divided by 8; GB200
NVL72 per 4-GPU tray, divided by 4) as listed in mid-2025. Parts it does not list come from
another public list named in their row; a GPU with no defensible list price has none
(``usd_per_gpu_hour=None``): the planner leaves it out unless a price is given
(``--price GPU=USD`` or ``--prices FILE``). List prices are neither reserved nor spot
prices: they set the ranking, not a quote, and they change; check the row's date.

Power. ``max_w`` is the vendor's maximum board power (TDP/TBP) from its datasheet;
``idle_w`` is not measured here: 10% of ``max_w`` (the nvidia-smi idle draw of data-centre
parts is typically 8-15% of their limit). The energy estimate
(:func:`gpu_power_w`) interpolates linearly in the replica's busy fraction, GPU boards
only: no host CPUs, network, cooling or PUE.
"""

from __future__ import annotations

import csv
import json
import math
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from simulator.config.catalog import get_gpu
from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once

IDLE_FRACTION = 0.10  # idle board power over max board power, where none was measured

_CW = "CoreWeave on-demand list price, mid-2025"


MAX_USD_PER_GPU_HOUR = 1e4  # no GPU rents for $10,000 an hour (1e308 printed a 300-digit fleet cost)


@dataclass(frozen=True)
class GPUPrice:
    """A GPU's price per GPU-hour (USD; None: no list price known) and board power (W)."""

    gpu: str
    usd_per_gpu_hour: float | None
    max_w: float
    price_source: str = ""
    price_date: str = ""
    power_source: str = ""

    @property
    def price_list(self) -> str:
        """The list the price comes from, without what it says of this GPU's node: the part before a colon
        (``CoreWeave on-demand list price, mid-2025: HGX H100 node $49.24/h``), parentheses dropped."""
        return re.sub(r"\s*\([^)]*\)", "", self.price_source.split(":")[0]).strip()

    @property
    def idle_w(self) -> float:
        return IDLE_FRACTION * self.max_w

    def __post_init__(self) -> None:
        if self.usd_per_gpu_hour is not None and not (math.isfinite(self.usd_per_gpu_hour)
                                                      and 0 < self.usd_per_gpu_hour <= MAX_USD_PER_GPU_HOUR):
            raise ConfigError(f"price.{self.gpu}", f"must be a number of USD per GPU-hour in (0, "
                              f"{MAX_USD_PER_GPU_HOUR:g}], got {self.usd_per_gpu_hour}", "e.g. --price h100-sxm=6.16")
        if not (math.isfinite(self.max_w) and self.max_w >= 0):
            raise ConfigError(f"power.{self.gpu}", f"must be a non-negative number of watts, got {self.max_w}")


_ROWS: tuple[GPUPrice, ...] = (
    GPUPrice("a100-40gb", 1.29, 400, "Lambda on-demand list price (8x A100 40GB SXM), mid-2025", "2025-06",
             "NVIDIA A100 datasheet: 400 W (SXM)"),
    GPUPrice("a100-80gb", 21.60 / 8, 400, f"{_CW}: HGX A100 80GB node $21.60/h", "2025-06",
             "NVIDIA A100 datasheet: 400 W (SXM)"),
    GPUPrice("a40", None, 300, "", "", "NVIDIA A40 datasheet: 300 W"),
    GPUPrice("rtx-3090", None, 350, "", "", "NVIDIA GeForce RTX 3090 specifications: 350 W total graphics power"),
    GPUPrice("l40s", 18.00 / 8, 350, f"{_CW}: 8x L40S node $18.00/h", "2025-06", "NVIDIA L40S datasheet: 350 W"),
    GPUPrice("h100-sxm", 49.24 / 8, 700, f"{_CW}: HGX H100 node $49.24/h", "2025-06",
             "NVIDIA H100 datasheet: up to 700 W (SXM)"),
    GPUPrice("h100-pcie", 2.49, 350, "Lambda on-demand list price (1x H100 PCIe), mid-2025", "2025-06",
             "NVIDIA H100 datasheet: 350 W (PCIe)"),
    GPUPrice("h200", 50.44 / 8, 700, f"{_CW}: HGX H200 node $50.44/h", "2025-06",
             "NVIDIA H200 datasheet: up to 700 W (SXM)"),
    GPUPrice("b200", 68.80 / 8, 1000, f"{_CW}: HGX B200 node $68.80/h", "2025-06",
             "NVIDIA HGX B200 spec table: 1000 W per GPU"),
    GPUPrice("gb200", 42.00 / 4, 1200, f"{_CW}: GB200 NVL72, $42.00/h per 4-GPU tray", "2025-06",
             "NVIDIA GB200 NVL72 spec table: 1200 W per GPU"),
    GPUPrice("b300", None, 1100, "", "", "NVIDIA HGX B300 spec table: 1100 W per GPU"),
    GPUPrice("gb300", None, 1400, "", "", "NVIDIA GB300 NVL72 spec table: 1400 W per GPU"),
    GPUPrice("rtx-pro-6000", None, 600, "", "", "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 600 W"),
    GPUPrice("mi300x", None, 750, "", "", "AMD Instinct MI300X datasheet: 750 W"),
    GPUPrice("h20", None, 400, "", "", "NVIDIA H20 product brief: 400 W"),
    GPUPrice("rtx-4090", None, 450, "", "", "NVIDIA GeForce RTX 4090 specifications: 450 W total graphics power"),
    GPUPrice("rtx-5090", None, 575, "", "", "NVIDIA GeForce RTX 5090 specifications: 575 W total graphics power"),
    GPUPrice("rtx-6000-ada", None, 300, "", "", "NVIDIA RTX 6000 Ada Generation datasheet: 300 W"),
    GPUPrice("rtx-a6000", None, 300, "", "", "NVIDIA RTX A6000 datasheet: 300 W"),
    GPUPrice("l40", None, 300, "", "", "NVIDIA L40 datasheet: 300 W"),
    GPUPrice("l4", 0.71, 72, "Google Cloud g2-standard-4 (1x L4, 4 vCPU) on-demand, us-central1, mid-2025",
             "2025-06", "NVIDIA L4 datasheet: 72 W"),
)
PRICES: dict[str, GPUPrice] = {row.gpu: row for row in _ROWS}


def price_of(gpu: str, overrides: dict[str, GPUPrice] | None = None) -> GPUPrice:
    """The row of ``gpu`` (any catalog spelling): an override first, else the table, else a
    row with no price and no power known."""
    name = get_gpu(gpu).name
    if overrides and name in overrides:
        return overrides[name]
    return PRICES.get(name, GPUPrice(name, None, 0.0))


def gpu_power_w(row: GPUPrice, busy_fraction: float) -> float:
    """One GPU's mean board power at ``busy_fraction`` of the time busy (linear between idle and max)."""
    busy = min(max(busy_fraction, 0.0), 1.0)
    return row.idle_w + (row.max_w - row.idle_w) * busy


def parse_price_flags(items: list[str] | None, base: dict[str, GPUPrice] | None = None) -> dict[str, GPUPrice]:
    """``["h100-sxm=6.5", ...]`` (``--price``) on top of ``base``: each GPU's row with its price replaced."""
    out = dict(base or {})
    given: dict[str, str] = {}  # each GPU's --price (a --prices file's row beneath it is replaced, as meant)
    for item in items or []:
        if "=" not in item:
            raise ConfigError("--price", f"{item!r} is not GPU=USD_PER_GPU_HOUR", "e.g. --price h100-sxm=6.16")
        name, value = (s.strip() for s in item.split("=", 1))
        try:
            gpu = get_gpu(name).name
        except ConfigError as err:  # (it named the catalog's field: "gpu")
            raise ConfigError("--price", f"{item!r}: {err.problem}", err.fix) from None
        if gpu in given:  # (the last one won, unsaid: a --prices file's repeated row is refused too)
            raise ConfigError("--price", f"{gpu} is priced twice: {given[gpu]!r} and {item!r}", "give it once")
        given[gpu] = item
        out[gpu] = _with_price(name, value, "--price", out)
    return out


def _with_price(name: str, value: object, where: str, current: dict[str, GPUPrice]) -> GPUPrice:
    if isinstance(value, bool):  # (JSON's or TOML's true: float(True) priced the GPU at $1/h)
        raise ConfigError(where, f"price of {name} is {str(value).lower()}, not a number",
                          "give USD per GPU-hour, e.g. 6.16")
    try:
        usd = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(where, f"price of {name} is not a number: {value!r}", "give USD per GPU-hour, e.g. 6.16") from None
    row = price_of(name, current)
    try:
        return replace(row, usd_per_gpu_hour=usd, price_source=f"given ({where})", price_date="")
    except ConfigError as err:  # (the row's own check names price.<gpu>: the flag or file given says it here)
        raise ConfigError(where, f"price of {name}: {err.problem}", err.fix) from None


PRICE_COLUMNS = ("gpu", "usd_per_gpu_hour", "max_w")
MAX_WATTS = 1e5  # one board: no GPU draws 100 kW (1e308 W printed a 300-digit J/tok)  # a price CSV's columns (max_w optional)


def load_price_file(path: Path, base: dict[str, GPUPrice] | None = None) -> dict[str, GPUPrice]:
    """Prices from a file (``--prices``): CSV with columns ``gpu,usd_per_gpu_hour`` (and
    optionally ``max_w``), or a TOML/JSON table ``{gpu = usd_per_gpu_hour}``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--prices", f"{path} {'is a folder' if path.is_dir() else 'does not exist'}",
                          "pass a CSV (gpu,usd_per_gpu_hour) or TOML/JSON file")
    out = dict(base or {})
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:  # a binary or non-UTF-8 file
        raise ConfigError("--prices", f"{path} cannot be read ({exc.reason})", "pass a UTF-8 CSV, TOML or JSON file") from None
    where = f"--prices {path}"
    if path.suffix.lower() in (".toml", ".json"):
        try:
            data = tomllib.loads(text) if path.suffix.lower() == ".toml" else loads_once(text, where)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError("--prices", f"{path} cannot be read ({exc})") from None
        if not isinstance(data, dict) or not data:  # (an empty table priced nothing, unsaid)
            raise ConfigError("--prices", f"{path} must map GPU names to USD per GPU-hour"
                              f"{', and it names none' if isinstance(data, dict) else ''}",
                              'e.g. h100-sxm = 6.16 (TOML) or {"h100-sxm": 6.16} (JSON)')
        named: dict[str, str] = {}
        for name, value in data.items():
            if isinstance(value, dict):  # ([prices] as a table of its own: 'prices' read as a GPU's name)
                raise ConfigError(where, f"[{name}] is a table; the file maps GPU names to USD per GPU-hour at its "
                                  "top level", 'e.g. h100-sxm = 6.16 (TOML) or {"h100-sxm": 6.16} (JSON)')
            try:
                canonical = get_gpu(name).name
            except ConfigError as err:
                raise ConfigError(where, err.problem, err.fix) from None
            if canonical in named:  # two spellings of one GPU: the later silently won
                raise ConfigError(where, f"{name} and {named[canonical]} are the same GPU, priced twice",
                                  "give each GPU one entry")
            named[canonical] = name
            out[canonical] = _with_price(name, value, where, out)
        return out
    reader = csv.DictReader(text.lstrip("\ufeff").splitlines())  # (a spreadsheet's byte-order mark is no column)
    rows = list(reader)
    columns = list(reader.fieldnames or [])
    if "gpu" not in columns or "usd_per_gpu_hour" not in columns:
        raise ConfigError("--prices", f"{path} needs the columns gpu,usd_per_gpu_hour", "one row per GPU")
    if not rows:
        raise ConfigError("--prices", f"{path} has no rows below its header", "one row per GPU")
    unknown = [c for c in columns if c not in PRICE_COLUMNS]
    if unknown:  # a misspelt max_w left the power at the table's, unseen
        raise ConfigError(where, f"unknown column(s) {', '.join(unknown)}", f"use {', '.join(PRICE_COLUMNS)}")
    seen: set[str] = set()
    for line, row in enumerate(rows, 2):
        if None in row:  # csv keeps a row's cells past the header under the key None
            raise ConfigError(where, f"line {line} has more cells than the header's {len(columns)} columns",
                              "one cell a column")
        lacking = [c for c in ("gpu", "usd_per_gpu_hour") if row[c] is None]  # (csv fills a short row with None)
        if lacking:  # (an optional max_w cell left off reads as empty, as a blank one does)
            raise ConfigError(where, f"line {line} lacks {' and '.join(lacking)}", "one cell a column: gpu,usd_per_gpu_hour")
        name = row["gpu"].strip()
        try:
            canonical = get_gpu(name).name
        except ConfigError as err:  # (as the JSON/TOML branch: the file and its line, not a bare "gpu: unknown GPU")
            raise ConfigError(where, f"line {line}: {err.problem}", err.fix) from None
        if canonical in seen:  # two prices for one GPU: which one the plan took would be a guess
            raise ConfigError(where, f"{name} is priced twice", "give each GPU one row")
        seen.add(canonical)
        priced = _with_price(name, row["usd_per_gpu_hour"], where, out)
        if row.get("max_w"):
            try:
                max_w = float(row["max_w"])
            except ValueError:
                max_w = math.nan
            if not (math.isfinite(max_w) and 0 < max_w <= MAX_WATTS):  # else a traceback, or NaN J/tok
                raise ConfigError(where, f"max_w of {name} must be a number of watts in (0, {MAX_WATTS:g}], got {row['max_w']!r}",
                                  "give the board power in W, or leave the cell empty")
            priced = replace(priced, max_w=max_w, power_source=f"given ({where})")
        out[get_gpu(name).name] = priced
    return out
