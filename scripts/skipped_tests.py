#!/usr/bin/env python3
"""The tests the last ctest run of a build folder skipped, each with its reason, and CI's rule on them.

Reads BUILD_DIR/Testing/Temporary/LastTest.log (every test's output) and BUILD_DIR/ctest.log (ctest's console
output, written by scripts/test.sh with --output-log: it alone names the tests skipped by their SKIP_RETURN_CODE,
which LastTest.log records as passed) and prints one line per skipped test:
    skipped  BUILD_DIR  TEST: REASON
The reason is the GTEST_SKIP message, or, for a test that exits with its SKIP_RETURN_CODE (77), the last line of
its output. A test that passed but printed "SKIPPED: WHY" (a script that could not run one of its parts) is
listed as "part skipped"; one ctest did not run for another reason (disabled, no executable) as
"not run".
With --ci (implied by CI=true in the environment) a skip is allowed only for a hardware reason:
  - no GPU: no CUDA device, or a build without the CUDA backend where that is by design (a sanitizer build, or a
    machine with no NVIDIA device), or a GPU present where a test checks the no-device path;
  - a CPU without AVX512_BF16/AMX (bf16 compute).
Every other skip (a missing package, data set or tool) is marked "NOT ALLOWED under CI=true" and the exit
status is 1. A build folder without a LastTest.log is an error (exit 2).
Run it right after ctest: `ctest -N` rewrites LastTest.log.
Usage: scripts/skipped_tests.py [--ci] BUILD_DIR...
"""
import os
import re
import sys

# Skip reasons that are about the machine, not its setup.
HARDWARE_REASONS = [
    re.compile(r"bf16 needs AVX512_BF16 or AMX"),  # the CPU backend's why_not(bf16)
    re.compile(r"no (usable )?CUDA device|needs \d+ CUDA device\(s\), found"),  # no GPU
    re.compile(r"a CUDA device is present: the no-device"),  # a GPU, where the no-device path is tested
]
# Skips because the build has no CUDA backend: by design in a sanitizer build, else only without a GPU.
NO_CUDA_BUILD = re.compile(r"built without CUDA|has no CUDA backend")

BLOCK_START = re.compile(r"^\d+/\d+ Testing: (.+)$", re.M)
PART_SKIPPED = re.compile(r"\bSKIPPED: (.+)")  # a script's line for a part it could not run
NOT_RUN = re.compile(r"^\s*\d+ - (.+) \(([^()]+)\)\s*$")  # ctest's "The following tests did not run:" list
GTEST_SKIP = re.compile(r"^[^\n]*: Skipped\n(.*?)\n\[  SKIPPED \] ", re.S | re.M)


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def has_nvidia_device():
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


def allowed(reason, build):
    """'' when the reason is a hardware one (allowed under CI=true), else why it is not."""
    for pattern in HARDWARE_REASONS:
        if pattern.search(reason):
            return ""
    if NO_CUDA_BUILD.search(reason):
        if cache_value(build, "TG_SANITIZE").upper() in ("ON", "1", "TRUE", "YES"):
            return ""  # the sanitizer build is CPU-only by design
        if not has_nvidia_device():
            return ""  # no GPU: nothing CUDA could run either
        return "a GPU is present but this build has no CUDA backend"
    return "not a hardware reason"


def not_run_of(build):
    """{test: ctest's status} of the tests ctest's console output says did not run ({} without ctest.log)."""
    statuses = {}
    try:
        with open(os.path.join(build, "ctest.log"), encoding="utf-8", errors="replace") as f:
            listing = False
            for line in f:
                if line.startswith("The following tests did not run:"):
                    listing = True
                elif listing:
                    m = NOT_RUN.match(line)
                    if not m:
                        listing = False
                    else:
                        statuses[m.group(1)] = m.group(2)
    except OSError:
        pass
    return statuses


def skips_of(build):
    """[(test, reason, kind)] of the last ctest run in `build`; kind: 'skipped', 'part skipped' or 'not run'."""
    log = os.path.join(build, "Testing", "Temporary", "LastTest.log")
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    not_run = not_run_of(build)
    found = []
    starts = list(BLOCK_START.finditer(text))
    for i, m in enumerate(starts):
        name = m.group(1).strip()
        block = text[m.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        out_begin = block.find("Output:\n")
        out_end = block.find("<end of output>")
        output = block[out_begin:out_end] if 0 <= out_begin < out_end else ""
        output = output.split("\n", 2)[2] if output.count("\n") >= 2 else ""  # after "Output:" and the dashes
        if not_run.get(name) == "Skipped" or "[  SKIPPED ] " in output:
            not_run.pop(name, None)
            g = GTEST_SKIP.search(output)
            if g:
                reason = " ".join(g.group(1).split())
            else:
                lines = [l.strip() for l in output.splitlines() if l.strip()]
                reason = lines[-1] if lines else "(no output)"
            found.append((name, reason, "skipped"))
            continue
        for line in output.splitlines():
            part = PART_SKIPPED.search(line)
            if part:
                found.append((name, part.group(1).strip(), "part skipped"))
    for name, status in not_run.items():  # never started: no output to give a reason
        found.append((name, f"ctest: {status}", "not run"))
    return found


def main(argv):
    ci = os.environ.get("CI") == "true"
    builds = []
    for a in argv[1:]:
        if a == "--ci":
            ci = True
        elif a.startswith("-"):
            print(__doc__.strip().splitlines()[-1], file=sys.stderr)
            return 2
        else:
            builds.append(a)
    if not builds:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    bad = 0
    total = 0
    for build in builds:
        try:
            skips = skips_of(build)
        except OSError as e:
            print(f"skipped_tests: {build}: no ctest log ({e.strerror}): run ctest there first", file=sys.stderr)
            return 2
        for name, reason, kind in skips:
            total += 1
            why_not = allowed(reason, build) if ci else ""
            mark = f"   NOT ALLOWED under CI=true ({why_not})" if why_not else ""
            bad += bool(why_not)
            print(f"{kind:<12} {build}  {name}: {reason}{mark}")
    where = ", ".join(builds)
    print(f"skipped_tests: {total} skipped in {where}" + (f"; {bad} not allowed under CI=true" if ci else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
