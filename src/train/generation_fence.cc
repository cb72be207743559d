// GenerationFence: the generation file read before the run and before every rename.
#include "terngrad/train/generation_fence.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "terngrad/core/error.h"

namespace tg {

int64_t GenerationFence::current(const std::string& train_dir) {
  const std::string path = (std::filesystem::path(train_dir) / kFileName).string();
  std::ifstream f(path);
  if (!f) return 0;
  std::stringstream text;
  text << f.rdbuf();
  int64_t g = -1;
  std::string rest;
  std::istringstream in(text.str());
  TG_CHECK((in >> g) && g >= 0 && !(in >> rest), "{}: expected one generation number, found '{}'", path, text.str());
  return g;
}

GenerationFence::GenerationFence(const std::string& train_dir, int64_t generation)
    : train_dir_(train_dir), generation_(generation) {
  TG_CHECK(generation >= 0, "--generation {} must not be negative", generation);
  if (generation == 0) return;
  const int64_t owner = current(train_dir);
  refuse_if_over(owner);
  TG_CHECK(owner == generation,
           "--generation {}: {} names {}: this machine does not see the elastic launcher's --train_dir {} (every "
           "machine of an elastic run must see one shared folder: a restarted job resumes on any machine from the "
           "checkpoints the others wrote)",
           generation, (std::filesystem::path(train_dir) / kFileName).string(),
           owner == 0 ? std::string("no generation") : "generation " + std::to_string(owner), train_dir);
  guard_ = std::make_unique<CommitGuard>(train_dir, [this] { check(); });
}

void GenerationFence::check() const {
  if (generation_ != 0) refuse_if_over(current(train_dir_));
}

void GenerationFence::refuse_if_over(int64_t owner) const {
  TG_CHECK(owner <= generation_,
           "--generation {} is over: {} names generation {}, which owns --train_dir {} now (the elastic launcher "
           "restarted the job without this process); nothing written",
           generation_, (std::filesystem::path(train_dir_) / kFileName).string(), owner, train_dir_);
}

}  // namespace tg
