"""Where the public data the project reads lives: ``../shared/data`` beside the checkout.

Its README (and one per folder) gives each table's provenance. The project reads it and never
writes there or copies it in: commands refuse an output path inside it
(:func:`simulator.util.paths.check_out_dir`), and what needs it skips cleanly where it is absent.
"""

from __future__ import annotations

from pathlib import Path

# simulator/config/shared_data.py -> parents[3] is the folder holding the checkout and shared/.
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
