#!/usr/bin/env python3
"""Prints the slowest tests of a JUnit XML report (ctest --output-junit, pytest --junitxml).

Usage: slowest_tests.py REPORT.xml [N]   (N defaults to 15)

One line per test: its wall time in seconds and its name, slowest first, then the sum of
all the report's tests. scripts/test calls it after every ctest stage."""

import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 15
    try:
        cases = ET.parse(path).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        print("slowest_tests: cannot read %s: %s" % (path, e), file=sys.stderr)
        return
    times = []
    for case in cases:
        name = case.get("name", "?")
        if case.get("classname") and case.get("classname") not in name:
            name = "%s::%s" % (case.get("classname"), name)
        times.append((float(case.get("time") or 0), name))
    times.sort(reverse=True)
    print("   the %d slowest of %d tests (%.0f s in all):" % (min(n, len(times)), len(times),
                                                            sum(t for t, _ in times)))
    for t, name in times[:n]:
        print("   %8.2f s  %s" % (t, name))


if __name__ == "__main__":
    main()
