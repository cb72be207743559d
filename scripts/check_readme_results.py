#!/usr/bin/env python3
"""Figures with provenance: every measured figure of README.md and bench/README.md is a block rendered from a
results file that a named benchmark command wrote into bench/results/ (format: bench/lib/results.sh).

A block in a README:

    <!-- results: bench/results/link.tsv; command: bench/link_bench.sh -n alexnet 1gbit; view: headline -->
    ...text rendered from the file (a provenance line, then a table or a sentence)...
    <!-- results end -->

(`view:` is optional; each kind has a `table` view, the default.) The check refuses, with one line naming the
README line, the file and the command to re-run:
  - a results file that lacks a provenance field (format, kind, command, commit, tree, date, cpu, isa, flags,
    load) or whose format or kind is unknown;
  - a results file from another commit: its commit must be a commit of this repository's history and an
    ancestor of HEAD (measured on this line of development, not on another branch), measured on a clean tree
    (`tree: clean`);
  - a results file written by another command than the block names;
  - a speed comparison from fewer than 3 repetitions, or whose repetitions are not interleaved (the rep numbers
    go down within the compared rows); a Google Benchmark file of fewer than 3 repetitions;
  - a block whose text differs from what the file renders to: the quoted figure must equal the value in the
    file (`--write` re-renders every block).
Prose outside the blocks and the code: in a paragraph that names a results file (`bench/results/...`), every decimal figure
(1.49, 0.32x, 23.2%) must be a rounding of a number of one of the files it names or of what the file renders to in
any view of its kind (a median, a ratio: computed from the file), or of such a number times 100 (a percentage),
else it is refused naming the paragraph's line: a figure quoted from elsewhere belongs in a block or
in another paragraph. Not figures: versions (after PyTorch, torch, torchvision, oneDNN, cuDNN, NCCL, Python,
version, v) and sizes of things (before "million", "M ", "GB", "MB", "KB").
In the files of FULLY_READ (README.md, bench/README.md and docs/*.md) every other paragraph is read
too: a decimal figure in a paragraph that names no results file is refused unless it
lies inside a phrase of the allow-list docs/figures-allowed.tsv (file, phrase, reason: a recipe's constant, a
published paper's figure with its citation, arithmetic on a model's shapes), and an entry no paragraph uses is
refused as stale. The flag tables between `<!-- flags:... begin -->` and `end -->` are the flag tables' defaults
(checked by readme_flags) and are not read.
A block whose results file does not exist yet must hold exactly the TODO line naming its command;
the check passes and counts them. Without git (not a checkout) and with results files present, it exits 77
(skipped: the commits cannot be checked).

usage: check_readme_results.py [--repo DIR] [--write] [README...]   check (or rewrite) the blocks (default: README.md,
                                                                     bench/README.md, docs/*.md)
       check_readme_results.py --render FILE [--view VIEW]          print what FILE renders to
"""
import argparse
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "lib"))
from render_results import (MIN_REPS, RENDERERS, SPEED_KINDS, Refused, fewer_or_more, need, num,  # noqa: E402,F401
                            reps_of)

FIELDS = ["format", "kind", "command", "commit", "tree", "date", "cpu", "isa", "flags", "load"]
BLOCK = re.compile(r"^<!-- results: (\S+); command: (.+?)(?:; view: (\w+))? -->$")
END = "<!-- results end -->"




# ---- results files ------------------------------------------------------------------------------------------
def read_results(path):
    """(header dict, list of row dicts) of a results file."""
    header, lines = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# ") and not lines:
                key, sep, value = line[2:].partition(": ")
                if sep and key == "resumed" and key in header:  # every resumption is said, in order
                    header[key] += "; resumed again " + value
                elif sep:
                    header.setdefault(key, value)
            elif line.strip():
                lines.append(line.split("\t"))
    if not lines:
        raise Refused("no table after the provenance lines")
    cols = lines[0]
    rows = []
    for n, cells in enumerate(lines[1:], 2):
        if len(cells) != len(cols):
            raise Refused("table row %d has %d cells, the header %d" % (n, len(cells), len(cols)))
        rows.append(dict(zip(cols, cells)))
    return header, rows


# The rows a speed comparison compares, by kind (default: the whole file): precision compares within a net.
INTERLEAVE_GROUPS = {"precision": lambda r: (r.get("net"), r.get("batch")),
                     "memory": lambda r: (r.get("net"), r.get("batch"))}


def not_interleaved(kind, rows):
    """Why the repetitions of a speed comparison are not interleaved (every compared system run once per repetition,
    repetition after repetition: the rep numbers never go down within a group, in the file's order), or ""."""
    group = INTERLEAVE_GROUPS.get(kind, lambda r: None)
    last = {}
    for i, r in enumerate(rows):
        try:
            rep = int(r.get("rep"))
        except (TypeError, ValueError):
            return "row %d has no repetition number" % (i + 1)
        g = group(r)
        if rep < last.get(g, rep):
            return "row %d is repetition %d after repetition %d: the repetitions ran one system after another" % (
                i + 1, rep, last[g])
        last[g] = rep
    return ""


def provenance_line(header, path):
    isa = header["isa"].split(" (")[0]
    if "restricted" in header:  # bench/lib/results.sh results_restrict_isa
        isa = "%s restricted to %s" % (isa, header["restricted"])
    line = "Measured at commit `%s` (%s) on %s, %s, load %s; command `%s`; raw data: `%s`." % (
        header["commit"][:10], header["date"], header["cpu"], isa, header["load"], header["command"], path)
    if "version" in header:  # the binary that ran (bench/lib/results.sh)
        line += " Binary: %s." % header["version"]
    if "peer" in header:  # the PyTorch beside ours: interpreter, torch version and what it ran
        line += " Peer: %s." % header["peer"]
    elif header.get("_torch_rows"):
        line += " Peer: %s." % unrecorded_peer(header)
    if "resumed" in header:  # a stopped run gone on with (tta_bench.sh --resume)
        line += " Resumed %s." % header["resumed"]
    return line


PYPI_PEER_COMMIT = "9551613"  # from this commit on the benches default to PyTorch from PyPI (bench/lib/peer_python.sh)


def unrecorded_peer(header):
    """What a results file with PyTorch rows but no `peer:` line says of its peer: a torch version another header
    field recorded, else that it is not recorded (and, for a file measured before PYPI_PEER_COMMIT, that the
    benches then defaulted to Debian's PyTorch 1.13)."""
    for key, value in header.items():
        m = re.search(r"torch: ?([\w.+]+)", value) if isinstance(value, str) else None
        if m and not key.startswith("_"):
            return "torch %s (the file's %s line)" % (m.group(1), key)
    if header.get("_before_pypi_peer"):
        return ("not recorded in the file; before commit %s the benches defaulted to Debian's PyTorch 1.13"
                % PYPI_PEER_COMMIT)
    return "not recorded in the file"


PEER_LINE_COMMIT = "d3a2968"  # from this commit on every bench that runs a PyTorch peer writes `peer:`


def mark_peer(repo, header, rows):
    """Sets the private header keys unrecorded_peer reads (PyTorch rows present, measured before PYPI_PEER_COMMIT);
    refused: a file with PyTorch rows and no `peer:` line measured from PEER_LINE_COMMIT on (an older file's block
    says what is known of its peer, and which machine it ran on, in its provenance line)."""
    header["_torch_rows"] = has_torch_rows(rows)
    if header["_torch_rows"] and "peer" not in header:
        if git(repo, "merge-base", "--is-ancestor", header["commit"], PEER_LINE_COMMIT).returncode != 0:
            raise Refused("has PyTorch rows but no `peer:` line (the interpreter and torch version beside ours)")
        header["_before_pypi_peer"] = git(repo, "merge-base", "--is-ancestor", header["commit"],
                                          PYPI_PEER_COMMIT).returncode == 0


def has_torch_rows(rows):
    return any(re.search(r"ddp|torch", v, re.I) for r in rows for v in r.values() if isinstance(v, str))


def render(header, rows, path, view):
    views = RENDERERS.get(header.get("kind"))
    if views is None:
        raise Refused("unknown kind '%s' (known: %s)" % (header.get("kind"), ", ".join(sorted(RENDERERS))))
    if view not in views:
        raise Refused("kind %s has no view '%s' (%s)" % (header["kind"], view, ", ".join(views)))
    return [provenance_line(header, path), ""] + views[view](header, rows)


def todo_lines(path, command):
    return ["**TODO (to be measured):** no results file yet. On a quiet machine, `%s` writes `%s`; then "
            "`python3 scripts/check_readme_results.py --write` puts its figures here." % (command, path)]


# ---- the check ----------------------------------------------------------------------------------------------
def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True)


def verify(repo, path, command):
    """Refused unless the results file at path (relative to repo) is one the README may quote."""
    header, rows = read_results(os.path.join(repo, path))
    missing = [f for f in FIELDS if not header.get(f)]
    if missing:
        raise Refused("lacks the provenance field%s %s" % ("s" if len(missing) > 1 else "", ", ".join(missing)))
    if header["format"] != "terngrad-results 1":
        raise Refused("unknown format '%s'" % header["format"])
    if header["command"] != command:
        raise Refused("was written by `%s`, not by the command the README names" % header["command"])
    commit = header["commit"]
    if not re.fullmatch(r"[0-9a-f]{40}", commit) or git(repo, "cat-file", "-e", commit + "^{commit}").returncode:
        raise Refused("commit %s is not a commit of this repository's history" % commit)
    if git(repo, "merge-base", "--is-ancestor", commit, "HEAD").returncode:
        raise Refused("commit %s is not an ancestor of HEAD (measured on another line of development)" % commit[:10])
    if header["tree"] != "clean":
        raise Refused("was measured on a modified tree (%s), not on commit %s as it is" % (header["tree"], commit[:10]))
    if header["kind"] in SPEED_KINDS and reps_of(rows) < MIN_REPS:
        raise Refused("a speed comparison from %d repetition(s); at least %d interleaved ones are needed"
                      % (reps_of(rows), MIN_REPS))
    if header["kind"] in SPEED_KINDS and not_interleaved(header["kind"], rows):
        raise Refused("its repetitions are not interleaved: " + not_interleaved(header["kind"], rows))
    if header["kind"] == "gbench" and (num(header.get("repetitions")) or 0) < MIN_REPS:
        raise Refused("a benchmark of %s repetition(s); at least %d are needed" % (header.get("repetitions", "no"),
                                                                                   MIN_REPS))
    return header, rows


def blocks(lines):
    """(index of the marker line, index of the end line, path, command, view) of every block."""
    out, i = [], 0
    while i < len(lines):
        m = BLOCK.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != END:
                if BLOCK.match(lines[j]):
                    break
                j += 1
            if j == len(lines) or lines[j] != END:
                raise Refused("line %d: a results block without `%s`" % (i + 1, END))
            out.append((i, j, m.group(1), m.group(2), m.group(3) or "table"))
            i = j
        i += 1
    return out


# A decimal figure: 1.49, 0.32x (a ratio), 23.2%, at a sentence's end too; not a part of 1.2.3 or of a name.
PROSE_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+)(?=x(?!\w)|×|[^\w.]|\.(?!\d)|$)")
NOT_A_FIGURE_BEFORE = re.compile(r"(PyTorch|torch|torchvision|oneDNN|cuDNN|NCCL|Python|version|v|nvcc|CUDA|ONNX Runtime|"
                                 r"TensorRT|Debian|GCC|format)\s*[≥>=]*\s*$", re.I)
NOT_A_FIGURE_AFTER = re.compile(r"^\s*(million|M\b|GB|MB|KB|GiB|MiB|KiB)")
FILE_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


ALLOWED_FIGURES = "docs/figures-allowed.tsv"
# The files whose every paragraph is read (a figure in a paragraph naming no results file needs an allowed phrase);
# in any other markdown file only the paragraphs that name results files are.
FULLY_READ = {"README.md", "bench/README.md", "docs/design.md", "docs/gpu-check.md", "docs/status.md",
              "docs/testing.md"}
FLAG_TABLE = re.compile(r"^<!-- flags:\S+ (begin|end) -->$")


def read_allowed(repo):
    """The allow-list: [file, phrase, reason, line] rows (# comments and empty lines skipped)."""
    path = os.path.join(repo, ALLOWED_FIGURES)
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cells = line.split("\t")
            if len(cells) != 3 or not all(c.strip() for c in cells):
                raise Refused("%s:%d: a row is file, phrase and reason, tab-separated: %r" % (ALLOWED_FIGURES, n, line))
            rows.append(cells + [n])
    return rows


def prose_figures(repo, readme, lines, allowed=(), used=None):
    """One error per decimal figure of prose that no results file of its paragraph holds and no allowed phrase
    covers (a paragraph naming results files: the figure must be in one of them; any other: in an allowed
    phrase). `used` collects the allow-list rows that covered a figure."""
    errors, in_block, paragraph, first = [], False, [], 0
    numbers = {}  # results file -> the numbers in it
    phrases = [a for a in allowed if a[0] == readme]

    def numbers_of(path):
        """The numbers of the file and of everything it renders to (every view of its kind): a median, a ratio or a
        difference a renderer computes from the file is as verified as the file's own numbers."""
        if path not in numbers:
            full = os.path.join(repo, path)
            with open(full, encoding="utf-8") as f:
                text = f.read()
            try:
                header, rows = read_results(full)
                for view in RENDERERS.get(header.get("kind"), {}):
                    text += "\n" + "\n".join(render(header, rows, path, view))
            except (Refused, OSError, ValueError, KeyError, ZeroDivisionError):
                pass  # the block check reports a file that does not render
            numbers[path] = {float(m.group()) for m in FILE_NUMBER.finditer(text)}
        return numbers[path]

    def covered(text, start, end):
        for a in phrases:
            at = text.find(a[1])
            while at >= 0:
                if at <= start and end <= at + len(a[1]):
                    if used is not None:
                        used.add(a[3])
                    return True
                at = text.find(a[1], at + 1)
        return False

    def check_paragraph():
        text = " ".join(paragraph)
        files = [f.rstrip(".,;:)") for f in re.findall(r"bench/results/[\w.\-]+", text)]
        files = [f for f in dict.fromkeys(files) if os.path.isfile(os.path.join(repo, f))]
        values = set().union(*(numbers_of(f) for f in files)) if files else set()
        for m in PROSE_NUMBER.finditer(text):
            if NOT_A_FIGURE_BEFORE.search(text[:m.start()]) or NOT_A_FIGURE_AFTER.match(text[m.end():]):
                continue
            if covered(text, m.start(), m.end()):
                continue
            figure = m.group(1)
            digits, value = len(figure.split(".")[1]), float(figure)
            if files:
                if any(round(v, digits) == value or round(100 * v, digits) == value for v in values):
                    continue
                errors.append("%s:%d: the figure %s is in none of %s, which its paragraph names (quote it from the "
                              "file, in a block, or drop it)" % (readme, first + 1, figure, ", ".join(files)))
            elif readme in FULLY_READ:
                errors.append("%s:%d: the figure %s (\"...%s...\") names no results file: name the file that holds it "
                              "in its paragraph, quote it in a block, or add its phrase and reason to %s" % (
                                  readme, first + 1, figure, text[max(0, m.start() - 30):m.end() + 10].strip(),
                                  ALLOWED_FIGURES))

    in_code = in_flags = False
    for i, line in enumerate(lines + [""]):
        if FLAG_TABLE.match(line):
            in_flags = line.endswith("begin -->")
            check_paragraph()
            paragraph = []
            continue
        if in_flags:
            continue
        if BLOCK.match(line):
            in_block = True
        if in_block:
            in_block = line != END
            continue
        if line.startswith("```"):  # code is commands, not figures
            in_code = not in_code
            check_paragraph()
            paragraph = []
            continue
        if in_code:
            continue
        if line.strip():
            if not paragraph:
                first = i
            paragraph.append(line)
        else:
            check_paragraph()
            paragraph = []
    return errors


def check(repo, readmes, write):
    errors, pending, quoted = [], 0, 0
    is_git = git(repo, "rev-parse", "HEAD").returncode == 0
    try:
        allowed = read_allowed(repo)
    except Refused as e:
        allowed = []
        errors.append(str(e))
    used = set()
    for readme in readmes:
        full = os.path.join(repo, readme)
        with open(full, encoding="utf-8") as f:
            lines = f.read().split("\n")
        try:
            found = blocks(lines)
        except Refused as e:
            errors.append("%s: %s" % (readme, e))
            continue
        for start, end, path, command, view in reversed(found):
            where = "%s:%d: %s" % (readme, start + 1, path)
            if not os.path.exists(os.path.join(repo, path)):
                want = todo_lines(path, command)
                pending += 1
            else:
                if not is_git:
                    print("SKIPPED: %s is not a git checkout: the commit of %s cannot be checked" % (repo, path))
                    sys.exit(77)
                try:
                    header, rows = verify(repo, path, command)
                    mark_peer(repo, header, rows)
                    want = render(header, rows, path, view)
                    quoted += 1
                except Refused as e:
                    errors.append("%s: %s; re-run: %s" % (where, e, command))
                    continue
                except (OSError, UnicodeDecodeError) as e:
                    errors.append("%s: unreadable (%s); re-run: %s" % (where, e, command))
                    continue
            if lines[start + 1:end] != want:
                if write:
                    lines[start + 1:end] = want
                else:
                    errors.append("%s: the README's text differs from what the file renders to (a figure not equal to "
                                  "the file's); run: python3 scripts/check_readme_results.py --write" % where)
        errors.extend(prose_figures(repo, readme, lines, allowed, used))
        if write:
            with open(full + ".tmp", "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            os.replace(full + ".tmp", full)
    for a in allowed:
        if a[0] in readmes and a[3] not in used:
            errors.append("%s:%d: the allowed phrase %r of %s covers no figure there any more: remove the row"
                          % (ALLOWED_FIGURES, a[3], a[1], a[0]))
    for e in errors:
        print(e)
    print("readme results: %d block(s) quote results files, %d wait to be measured, %d refused"
          % (quoted, pending, len(errors)))
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--write", action="store_true", help="re-render every block from its results file")
    ap.add_argument("--render", metavar="FILE", help="print what a results file renders to, and exit")
    ap.add_argument("--view", default="table")
    ap.add_argument("readmes", nargs="*")
    args = ap.parse_args()
    if not args.readmes:
        args.readmes = ["README.md", "bench/README.md"] + sorted(
            os.path.relpath(p, args.repo) for p in glob.glob(os.path.join(args.repo, "docs", "*.md")))
    if args.render:
        try:
            header, rows = read_results(args.render)
            print("\n".join(render(header, rows, args.render, args.view)))
        except (Refused, OSError) as e:
            print("%s: %s" % (args.render, e), file=sys.stderr)
            return 1
        return 0
    return check(args.repo, args.readmes, args.write)


if __name__ == "__main__":
    sys.exit(main())
