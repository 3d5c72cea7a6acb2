"""The slowest tests of a pytest run, from its JUnit XML (`pytest --junitxml FILE`), side by side with an
earlier run's: what each costs (setup, call and teardown, as pytest-xdist's worker measured them) and
the ratio. benchmarks/RESULTS.md keeps the table ("The test suite").

    python tools/slowest_tests.py AFTER.xml [--before BEFORE.xml] [--top 30]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET


def durations(path: str) -> dict[str, float]:
    found = {}
    for case in ET.parse(path).iter("testcase"):
        nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        found[nodeid] = float(case.get("time", 0))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("after")
    parser.add_argument("--before")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    after = durations(args.after)
    before = durations(args.before) if args.before else {}
    ranked = sorted(before or after, key=lambda nodeid: -(before or after)[nodeid])[: args.top]
    print(f"{'before s':>9} {'after s':>8} {'ratio':>6}  test")
    for nodeid in ranked:
        was, now, note = before.get(nodeid), after.get(nodeid), ""
        if now is None:  # split into parameters since: their sum
            parts = [seconds for other, seconds in after.items() if other.split("[", 1)[0] == nodeid]
            now, note = (sum(parts), f"  (now {len(parts)} tests, summed)") if parts else (None, "")
        ratio = f"{now / was:6.2f}" if was and now is not None else "     -"
        print(f"{was if was is not None else float('nan'):9.2f} {now if now is not None else float('nan'):8.2f} {ratio}  {nodeid}{note}")
    print(f"{sum(before.values()):9.1f} {sum(after.values()):8.1f}         all {len(after)} tests, summed over workers")


if __name__ == "__main__":
    main()
