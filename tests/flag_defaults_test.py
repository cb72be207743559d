#!/usr/bin/env python3
"""A flag two programs share is one flag: the same default and the same meaning in every program that has it (each
defined once, in a sub-table the programs embed: backend_flags(), data_flags(), log_level_flag()), and the folder
terngrad-eval and terngrad-export read by default is the trainer's --train_dir default. Read from each program's
`--help-markdown` (the README's flag tables). Usage: flag_defaults_test.py BIN_DIR. (ctest flag_defaults, label
unit.)"""
import os
import subprocess
import sys
import unittest

PROGRAMS = ["terngrad-train", "terngrad-eval", "terngrad-export", "terngrad-import"]
# One name, different settings: what each program does with it differs, so its default and meaning may too.
SAME_NAME_OTHER_SETTING = {
    "--net": "import: the network the weights are of (required)",
    "--image_size": "import: the size the checkpoint records",
    "--batch_size": "train: the total batch; eval: the evaluation batch; export: the model's batch dimension",
    "--max_steps": "eval: stop after the checkpoint of this step",
    "--checkpoint_dir": "eval and export say what they do with it (its default: the test below)",
}
BIN_DIR = ""


def flag_rows(program):
    """{flag: (default, meaning)} of PROGRAM's --help-markdown table."""
    out = subprocess.run([os.path.join(BIN_DIR, program), "--help-markdown"], check=True, capture_output=True,
                         text=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[0].startswith("`--"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


class FlagDefaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tables = {p: flag_rows(p) for p in PROGRAMS}

    def test_every_program_has_a_table(self):
        for program, rows in self.tables.items():
            self.assertGreater(len(rows), 3, program)

    def test_a_shared_flag_has_one_default_and_one_meaning(self):
        seen = {}
        shared = set()
        for program, rows in self.tables.items():
            for flag, value in rows.items():
                if flag in SAME_NAME_OTHER_SETTING:
                    continue
                if flag in seen and seen[flag][1] != value:
                    self.fail("%s in %s: %r, in %s: %r" % (flag, seen[flag][0], seen[flag][1], program, value))
                if flag in seen:
                    shared.add(flag)
                seen.setdefault(flag, (program, value))
        for flag in ("--device", "--threads", "--log_level"):  # what the sub-tables give several programs
            self.assertIn(flag, shared)

    def test_the_checkpoint_folder_default_is_the_trainers_train_dir(self):
        train_dir = self.tables["terngrad-train"]["--train_dir"][0]
        for program in ("terngrad-eval", "terngrad-export"):
            self.assertEqual(self.tables[program]["--checkpoint_dir"][0], train_dir, program)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    BIN_DIR = sys.argv.pop(1)
    unittest.main()
