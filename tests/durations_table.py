"""The suite's durations, before and after a change, as docs/testing.md shows them.

``python tests/durations_table.py record JUNIT.xml OUT.json --wall S --suite S --label L``
keeps what a ``pytest --junitxml`` run measured (each test's setup + call + teardown seconds, as
pytest-xdist reports them per worker) with the run's wall times; ``python
tests/durations_table.py table BEFORE.json AFTER.json`` prints the markdown tables: the 30
longest tests of the first run beside the second's, and the total per file.
"""
import argparse
import collections
import json
import sys
import xml.etree.ElementTree as ElementTree


def record(junit: str, out: str, wall: float, suite: float, label: str) -> None:
    tests = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        tests[f"{module}.py::{case.get('name')}"] = round(float(case.get("time", 0)), 2)
    with open(out, "w") as f:
        json.dump({"label": label, "wall_seconds": wall, "suite_seconds": suite,
                   "tests": tests}, f, indent=0, sort_keys=True)
        f.write("\n")


def per_file(tests):
    totals, counts = collections.Counter(), collections.Counter()
    for name, seconds in tests.items():
        totals[name.split("::")[0]] += seconds
        counts[name.split("::")[0]] += 1
    return totals, counts


def table(before_path: str, after_path: str) -> str:
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    old, new = before["tests"], after["tests"]
    lines = [f"| | {before['label']} | {after['label']} |", "| --- | ---: | ---: |",
             f"| `make test`, wall | {before['wall_seconds']:.0f} s | {after['wall_seconds']:.0f} s |",
             f"| the suite, wall | {before['suite_seconds']:.0f} s | {after['suite_seconds']:.0f} s |",
             f"| tests | {len(old)} | {len(new)} |",
             f"| sum of test times (2 workers) | {sum(old.values()):.0f} s | "
             f"{sum(new.values()):.0f} s |", "",
             "The 30 longest tests before (seconds; `-` where the test is gone):", "",
             "| test | before | after |", "| --- | ---: | ---: |"]
    for name, seconds in sorted(old.items(), key=lambda item: -item[1])[:30]:
        later = f"{new[name]:.1f}" if name in new else "-"
        lines.append(f"| `{name}` | {seconds:.1f} | {later} |")
    old_files, old_counts = per_file(old)
    new_files, new_counts = per_file(new)
    lines += ["", "Per file (seconds, tests):", "", "| file | before | after |",
              "| --- | ---: | ---: |"]
    for name in sorted(set(old_files) | set(new_files), key=lambda n: -old_files.get(n, 0)):
        lines.append(f"| `{name}` | {old_files.get(name, 0):.1f} ({old_counts.get(name, 0)}) | "
                     f"{new_files.get(name, 0):.1f} ({new_counts.get(name, 0)}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("junit")
    rec.add_argument("out")
    rec.add_argument("--wall", type=float, required=True)
    rec.add_argument("--suite", type=float, required=True)
    rec.add_argument("--label", required=True)
    tab = commands.add_parser("table")
    tab.add_argument("before")
    tab.add_argument("after")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.junit, args.out, args.wall, args.suite, args.label)
    else:
        print(table(args.before, args.after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
