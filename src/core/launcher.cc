// launched_by_mpi(): the launchers' environment variables.
#include "terngrad/core/launcher.h"

#include <cstdlib>

namespace tg {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace tg
