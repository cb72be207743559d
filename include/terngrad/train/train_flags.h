// The flag table of terngrad-train (core/flag_table.h): one entry per TrainConfig member, in the order of
// --help and the README. The command line, TrainConfig::validate's per-flag checks, TrainConfig::to_flags and
// `terngrad-train --help-markdown` are generated from it.
//
// Adding a flag: a member with its default in TrainConfig and one entry in train_flags.cc, e.g.
//   std::string precision = "fp32";                                  // TrainConfig
//   {"precision", &C::precision, "...", one_of<Precision>(), 0, {{"fp16", "fp16"}}},   // --fp16 is an alias
// (with an EnumNames<Precision> list beside the enum). The README table is regenerated with
// scripts/check_readme_flags.py --write; checkpoints store the new flag unless it is marked kFlagNotSaved.
#pragma once

#include <string>
#include <vector>

#include "terngrad/core/flag_table.h"
#include "terngrad/train/train_config.h"

namespace tg {

const std::vector<Flag<TrainConfig>>& train_flags();

// The check of a --net flag: a name of the model registry (the error lists them); terngrad-import's too.
FlagCheck known_network();

// Every run writes its flags to <train_dir>/flags.ini, a file --config reads (the run repeated from it).
inline constexpr const char* kFlagsFileName = "flags.ini";

// The flags a resumed run must share with the checkpoint (kFlagResume): they decide which data each process
// reads, so the data cursor means the same batches.
std::vector<std::string> resume_flag_names();

}  // namespace tg
