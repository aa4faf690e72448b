"""``simulate models`` and ``simulate gpus``: list the catalogs."""

from __future__ import annotations

from simulator.cli.app import app, console
from simulator.cli.tables import print_table
from simulator.config.catalog import GPUS, MODELS


@app.command()
def models() -> None:
    """List the catalog's models (short name, Hugging Face id, shape, active parameters, experts, attention)."""
    from rich.table import Table

    table = Table("name", "hf id", "layers", "hidden", "heads", "kv heads", "ffn", "vocab", "max len", "params (B)",
                  "active (B)", "experts", "attention")
    for m in MODELS.values():
        experts = (f"{m.num_experts} top-{m.num_experts_per_tok}" + (f" +{m.num_shared_experts} shared"
                   if m.num_shared_experts else "")) if m.is_moe else "-"
        attention = "MLA" if m.is_mla else ("MHA" if m.num_kv_heads == m.num_heads else "GQA")
        if m.num_sliding_layers:
            attention += f", {m.num_sliding_layers} window-{m.sliding_window} layers"
        if m.is_sparse_attention:
            attention += f", sparse (top {m.index_topk} keys)"
        if m.num_linear_layers:
            attention += f", {m.num_linear_layers} Gated DeltaNet layers"
        table.add_row(m.name, m.hf_id, str(m.num_layers), str(m.hidden_size), str(m.num_heads), str(m.num_kv_heads),
                      str(m.ffn_size), str(m.vocab_size), str(m.max_model_len), f"{m.num_params / 1e9:.1f}",
                      f"{m.num_active_params / 1e9:.1f}", experts, attention)
    print_table(console(), table)


@app.command()
def gpus() -> None:
    """List the catalog's GPUs (dense bf16/fp8/fp4 peaks, HBM bandwidth and size, links)."""
    from rich.table import Table

    table = Table("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GB/s", "memory GiB", "NVLink GB/s/dir",
                  "PCIe GB/s/dir", "aliases")
    for g in GPUS.values():
        table.add_row(g.name, f"{g.bf16_flops / 1e12:.0f}", f"{g.fp8_flops / 1e12:.0f}" if g.fp8_flops else "-",
                      f"{g.fp4_flops / 1e12:.0f}" if g.fp4_flops else "-",
                      f"{g.hbm_bytes_per_s / 1e9:.0f}",
                      f"{g.memory_bytes / 2**30:.0f}", f"{g.nvlink_bytes_per_s / 1e9:.0f}",
                      f"{g.pcie_bytes_per_s / 1e9:.0f}", ", ".join(g.aliases))
    print_table(console(), table)
