"""`python -m bench [--quick] [--threads N|auto] [--out DIR] [--sections a,b]`: run the suite.

The README command is `bash scripts/bench.sh` (set-up, then this with the full settings).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from .common import REPO, Log, Settings, csv
from .suite import OPTIONAL_SECTIONS, SECTIONS, run_suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="short settings, for debugging the harness")
    ap.add_argument("--tiny", action="store_true", help="the tiny random pair with tiny settings (smoke)")
    ap.add_argument("--threads", default="auto", help="torch threads for every measurement, or 'auto' (probe)")
    ap.add_argument("--out", type=Path, default=REPO / "docs", help="where benchmarks.md/.json go")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}, plus "
                    f"the optional {OPTIONAL_SECTIONS} (not run by default)")
    args = ap.parse_args(argv)
    log = Log()
    import specviz

    t0 = time.perf_counter()
    if args.tiny:
        pair, settings, name = specviz.build_tiny_pair(seed=0), Settings.tiny(), "tiny"
    else:
        log("loading the default pair (converts the target's GGUF once, ~20 s)")
        settings = Settings.quick() if args.quick else Settings.full()
        pair, name = specviz.load_default_pair(), "default"
    log(f"loaded in {time.perf_counter() - t0:.1f} s")
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    run_suite(pair, settings, args.out, threads_arg=args.threads, pair_name=name, command=command.strip(),
              sections=tuple(csv(args.sections)), log=log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
