#!/usr/bin/env python3
"""The README's flag tables, checked against the programs: the lines between
`<!-- flags:PROGRAM begin -->` and `<!-- flags:PROGRAM end -->` must be what `PROGRAM --help-markdown` prints
(the table generated from the program's flag table). Prints a unified diff per differing table and exits 1.
With --write, rewrites the README's tables instead.
Usage: scripts/check_readme_flags.py [--write] README BIN_DIR PROGRAM..."""
import difflib
import os
import subprocess
import sys


def main(argv):
    write = "--write" in argv
    argv = [a for a in argv if a != "--write"]
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    readme, bin_dir, programs = argv[0], argv[1], argv[2:]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    failed = False
    for program in programs:
        begin, end = f"<!-- flags:{program} begin -->\n", f"<!-- flags:{program} end -->"
        b, e = text.find(begin), text.find(end)
        if b < 0 or e < b:
            print(f"{readme}: no '{begin.strip()}' ... '{end}' markers", file=sys.stderr)
            failed = True
            continue
        want = subprocess.run([os.path.join(bin_dir, program), "--help-markdown"], check=True, capture_output=True,
                              text=True).stdout
        have = text[b + len(begin):e]
        if write:
            text = text[:b + len(begin)] + want + text[e:]
        elif have != want:
            failed = True
            print(f"{readme}: the {program} flag table differs from `{program} --help-markdown` "
                  f"(regenerate: scripts/check_readme_flags.py --write {readme} {bin_dir} {program}):")
            sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "README",
                                                       f"{program} --help-markdown"))
    if write:
        tmp = readme + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, readme)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
