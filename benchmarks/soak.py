"""The long chaos soak (a script, not a test): ``benchmarks/chaos/engine.py`` for as long as you like.

Runs two leader-elected ``tfjob-controller run`` processes against a ``tfjob-controller sim`` process
under faults drawn from ``--seed`` for ``--minutes`` in all (the last minute or so is convergence,
the quiet window and the final deletion), kills the leader ``--leader-kills`` times, and writes the
result (seed, duration, faults by kind, checks by invariant, outcome, RSS first/last/max per
controller process) to docs/benchmarks/soak.md, adding a row to the table of runs kept there. Exits 1 if any invariant was violated; the seed and
the log directory are printed either way.

Usage: .venv/bin/python benchmarks/soak.py --seed 7 --minutes 8 [--jobs 12] [--leader-kills 2]
       [--workdir /tmp/soak-7] [--output docs/benchmarks/soak.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.chaos.engine import SoakConfig, previous_rows, render_markdown, run_soak  # noqa: E402
from benchmarks.chaos.invariants import Bounds  # noqa: E402

# Time the soak needs after the fault phase: convergence (usually well under a minute), the quiet
# window and the final deletion. The fault phase gets the rest of --minutes.
SETTLE_SECONDS = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--jobs", type=int, default=12, help="jobs kept alive at once (default 12)")
    parser.add_argument("--leader-kills", type=int, default=2, help="leader SIGKILLs during the faults (default 2)")
    parser.add_argument("--workdir", type=Path, help="logs and kubeconfig (default: a new temporary directory)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks" / "soak.md")
    args = parser.parse_args(argv)
    if args.minutes * 60 <= SETTLE_SECONDS + 30:
        parser.error(f"--minutes must leave at least 30 s of faults after {SETTLE_SECONDS:.0f} s of settling")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"soak-{args.seed}-"))
    bounds = Bounds()
    config = SoakConfig(
        seed=args.seed,
        fault_seconds=args.minutes * 60 - SETTLE_SECONDS,
        workdir=workdir,
        jobs=args.jobs,
        leader_kills=args.leader_kills,
        bounds=bounds,
        progress=lambda line: print(line, flush=True),
    )
    result = anyio.run(run_soak, config)
    command = (
        f"benchmarks/soak.py --seed {args.seed} --minutes {args.minutes:g} --jobs {args.jobs} "
        f"--leader-kills {args.leader_kills}"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    earlier = previous_rows(args.output.read_text()) if args.output.exists() else []
    args.output.write_text(render_markdown(result, command, bounds, earlier))
    print(result.summary())
    print(f"wrote {args.output}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
