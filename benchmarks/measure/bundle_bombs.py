"""What `mcsa-bench merge` and `mcsa-bench report --bundle` do with a bundle bomb, before and after the bundle
checks (mcsa_bench/tracking/bundleformat.py; issue 52): a good bundle with one member made to inflate to
gigabytes, the rest left as they are (docs/reliability.md, "Who may write what"):

- ``manifest``: manifest.json padded with spaces to 2 GB inside its closing brace (still valid JSON);
- ``metrics``: metrics.csv's rows repeated to 3 GB (every row valid);
- ``tags``: tags.csv's rows repeated to 3 GB.

Each command runs in a process of its own with mcsa_bench imported from the tree given (``--before``: e.g.
``git archive BASE | tar -x -C /tmp/before``; after: this one), under an address-space limit (``--memory``,
default 6 GB, so that a bomb cannot take the shared machine's memory) and a time limit (``--limit``, default
120 s), the two trees alternating; what is recorded per run: exit status, wall and CPU seconds, peak resident
memory (the child's own ``ru_maxrss``), and the last line of stderr.

    OMP_NUM_THREADS=1 python benchmarks/measure/bundle_bombs.py --before /tmp/before
        [--bundle benchmarks/results/grids/funnel.zip] [--dir /tmp/bundle-bombs] [--only manifest]

The results go to benchmarks/results/bundle_bombs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from harness import describe, load_average, machine, save

HERE = Path(__file__).resolve().parents[2]
CLI = "import sys; from mcsa_bench.cli import main; sys.exit(main(sys.argv[1:]))"
GB = 10**9
#: bomb -> (member, bytes it inflates to)
BOMBS = {"manifest": ("manifest.json", 2 * GB), "metrics": ("metrics.csv", 3 * GB), "tags": ("tags.csv", 3 * GB)}


def build(good: Path, bomb: str, out: Path) -> Path:
    """``good`` with the bomb's member inflating to its size (written streamed, deflated at level 9)."""
    member, size = BOMBS[bomb]
    if out.exists():
        return out
    partial = out.with_suffix(".partial")
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for info in source.infolist():
            data = source.read(info)
            if info.filename != member:
                z.writestr(info.filename, data)
                continue
            with z.open(member, "w", force_zip64=True) as handle:
                if member == "manifest.json":
                    head, tail = data.rstrip()[:-1], b"}\n"
                    handle.write(head)
                    block = b" " * 2**24
                    for _ in range((size - len(head)) // len(block)):
                        handle.write(block)
                    handle.write(tail)
                else:
                    header, rows = data.split(b"\n", 1)
                    handle.write(header + b"\n")
                    block = rows * max(1, 2**24 // len(rows))
                    for _ in range(size // len(block)):
                        handle.write(block)
    partial.replace(out)
    return out


def run(arguments: list[str], source: Path, cwd: Path, memory: int, limit: float) -> dict:
    """One command in a process of its own: exit status, wall and CPU seconds, peak RSS (MB), stderr's last line."""
    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    err = cwd / "stderr.txt"
    with open(err, "w") as handle:
        process = subprocess.Popen([sys.executable, "-c", CLI, *arguments], cwd=cwd, stdout=subprocess.DEVNULL,
                                   stderr=handle, preexec_fn=limits,
                                   env={**os.environ, "PYTHONPATH": str(source)})
    start, killed = time.perf_counter(), False
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > limit and not killed:
            os.kill(process.pid, signal.SIGKILL)
            killed = True
        time.sleep(0.05)
    wall = time.perf_counter() - start
    lines = err.read_text(errors="replace").strip().splitlines()
    return {"exit": None if killed else os.waitstatus_to_exitcode(status), "killed_at_limit": killed,
            "wall": round(wall, 2), "cpu": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "stderr_lines": len(lines),
            "last_line": lines[-1][:300] if lines else "", "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the source tree to compare with")
    parser.add_argument("--bundle", type=Path, default=HERE / "benchmarks/results/grids/funnel.zip")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bundle-bombs"))
    parser.add_argument("--memory", type=float, default=6.0, help="address-space limit per command, GB")
    parser.add_argument("--limit", type=float, default=120.0, help="time limit per command, s")
    parser.add_argument("--only", choices=BOMBS)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    trees = {"before": args.before.resolve(), "after": HERE}
    load_start, info = load_average(), machine()
    results: dict[str, dict] = {}
    for number, bomb in enumerate(b for b in BOMBS if args.only in (None, b)):
        started = time.perf_counter()
        path = build(args.bundle.resolve(), bomb, args.dir / f"{bomb}.zip")
        print(f"{bomb}: {path.stat().st_size / 1e6:.1f} MB, inflating to {BOMBS[bomb][1] / GB:.0f} GB in "
              f"{BOMBS[bomb][0]} (built in {time.perf_counter() - started:.0f} s)", flush=True)
        results[bomb] = {"bytes": path.stat().st_size, "member": BOMBS[bomb][0], "inflates_to": BOMBS[bomb][1]}
        for command in ("merge", "report"):
            order = list(trees) if number % 2 == 0 else list(reversed(trees))
            for tree in order:
                work = args.dir / f"{bomb}-{command}-{tree}"
                work.mkdir(exist_ok=True)
                arguments = (["merge", str(path), f"tracking.uri=sqlite:///{work / 'target.db'}"] if command == "merge"
                             else ["report", "--bundle", str(path), "--no-figures", "--out", str(work / "report")])
                sample = run(arguments, trees[tree], work, int(args.memory * GB), args.limit)
                results[bomb].setdefault(command, {})[tree] = sample
                print(f"  {command:<6} {tree:<6} exit {sample['exit']} {sample['wall']:7.1f} s wall "
                      f"{sample['cpu']:7.1f} s CPU {sample['peak_rss_mb']:6d} MB peak (load {sample['load']:.1f}): "
                      f"{sample['last_line'][:160]}", flush=True)
    print(describe(info, load_start, load_average()))
    save("bundle_bombs", {"machine": info, "load_average": [load_start, load_average()], "bundle": str(args.bundle),
                          "memory_limit_gb": args.memory, "time_limit_s": args.limit, "results": results})
    print(json.dumps({b: {c: {t: (s["exit"], s["wall"], s["peak_rss_mb"]) for t, s in r[c].items()}
                          for c in ("merge", "report")} for b, r in results.items()}))


if __name__ == "__main__":
    main()
